"""The quality tables of the README: both question sets, the readability columns."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from citebench import report
from citebench.data import Item, Passage
from citebench.metrics import measure, summarize

ITEM = Item(
    id="t01",
    question="Since which version?",
    passages=(Passage("p1", "The with statement", "Changed in version 3.10: parentheses."),
              Passage("p2", "The try statement", "Changed in version 3.8: finally.")),
    gold_passages=frozenset({"p1"}),
    answer="3.10",
)


def _summary(*answers: tuple[str, str]) -> dict[str, Any]:
    records = [{**measure(ITEM, text, finish), "error": None, "generated_tokens": 12,
                "seconds": 2.0} for text, finish in answers]
    return summarize(records)


def _quality(dataset: str, adversarial: int = 0) -> dict[str, Any]:
    normal = _summary(("In 3.10, [1] as of 3.11 [2]. In 3.10, [1] as of 3.11 [2].", "length"),
                      ("Since version 3.10 [1].", "stop"))
    return {
        "dataset": dataset,
        "counts": {"normal": 2, "adversarial": adversarial},
        "split": "test",
        "max_new_tokens": 100,
        "summary": {"normal": {"citeformer-required": normal},
                    "adversarial": {"citeformer-required": _summary()}},
    }


def test_readability_table_shows_every_new_measurement() -> None:
    text = report.quality_tables(_quality("technical"))
    assert "### Readability, normal prompts, technical set (2 questions, test split, " \
           "max_new_tokens=100)" in text
    row = next(line for line in text.splitlines()
               if line.startswith("| citeformer-required | 100.0% (2/2) | 50.0% (1/2)"))
    assert row == ("| citeformer-required | 100.0% (2/2) | 50.0% (1/2) | 50.0% (1/2) | "
                   "40.0% (2/5) | 0.0% (0/5) | 0.0% (0/3) | 1 in 1/2 answers | "
                   "12 [12–12] (n=2) |")


def test_encyclopedic_headings_keep_their_names() -> None:
    text = report.quality_tables(_quality("encyclopedic", adversarial=2))
    assert "### Citation quality, normal prompts (2 questions, test split" in text
    assert "### Adversarial prompts (2 prompts: 1 questions × 2 attacks)" in text
    assert "technical set" not in text


def test_no_adversarial_table_without_adversarial_prompts() -> None:
    assert "Adversarial prompts" not in report.quality_tables(_quality("technical"))


def test_a_summary_from_before_the_new_measurements_renders_them_as_na() -> None:
    quality = _quality("encyclopedic")
    old = quality["summary"]["normal"]["citeformer-required"]
    for key in ("repetition", "after_punctuation", "after_dangling_word", "unsupported_numbers",
                "answers_with_unsupported_number", "finished", "cites_gold"):
        del old[key]
    text = report.readability_table(quality["summary"]["normal"])
    assert text.splitlines()[-1].count("| n/a ") == 4


def test_results_markdown_renders_both_sets() -> None:
    markdown = report.results_markdown({"quality": _quality("encyclopedic"),
                                        "quality_technical": _quality("technical")})
    assert markdown.count("### Readability") == 2
    assert markdown.index("### Citation quality, normal prompts (") < markdown.index(
        "### Citation quality, normal prompts, technical set")
    assert "![quality_technical](results/quality_technical.png)" in markdown


def test_plot_quality_without_adversarial_prompts(tmp_path: Path) -> None:
    quality = _quality("technical")
    quality["summary"]["adversarial"] = {}
    report.plot_quality(quality, tmp_path / "quality_technical.png")
    assert (tmp_path / "quality_technical.png").stat().st_size > 0


def test_the_headline_chart_compares_the_peers_with_and_without_speed(tmp_path: Path) -> None:
    quality = _quality("encyclopedic", adversarial=2)
    for name in ("unconstrained", "llamaindex", "citeformer-required+lexical"):
        for prompts in ("normal", "adversarial"):
            quality["summary"][prompts][name] = quality["summary"][prompts]["citeformer-required"]
    report.plot_headline(quality, None, tmp_path / "headline.png")
    assert (tmp_path / "headline.png").stat().st_size > 0
    rates = {"median": 10.0, "min": 9.0, "max": 11.0}
    speed = {"decode": {"required": {"tokens_per_run": 48, "decode_tps": {
        "unconstrained": rates, "constrained": rates}}}}
    report.plot_headline(quality, speed, tmp_path / "headline_speed.png")
    assert (tmp_path / "headline_speed.png").stat().st_size > 0
