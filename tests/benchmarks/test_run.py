"""``benchmarks/run.py``: the quality section on both sets, its flags and result files, with a
scripted generator instead of the model."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import run

from citeformer import CitedAnswer, Source
from citeformer.request import build_request
from citeformer.testing import FakeGenerator

ANSWER = "It is cleared, [1] as of version 3.99 [1]."


class ScriptedGenerator:
    """What the quality systems call of a ``CiteGenerator``, answered from a script."""

    def __init__(self, script: str) -> None:
        self.fake = FakeGenerator(script)

    def generate(
        self, question: str, sources: list[Source], policy: str = "required", **options: Any
    ) -> CitedAnswer:
        return self.fake.answer(build_request(question, sources, policy, **options))


SETTINGS = replace(run.QUICK, questions=2, adversarial_questions=1, split="test",
                   systems=("unconstrained", "citeformer-required"))


def test_run_quality_on_the_technical_set() -> None:
    gen = ScriptedGenerator(ANSWER)
    payload = run.run_quality(gen, SETTINGS, "technical")  # type: ignore[arg-type]
    assert payload["dataset"] == "technical"
    assert payload["counts"] == {"normal": 2, "adversarial": 2}
    assert [r["item"] for r in payload["records"]["normal"]] == ["t02", "t02", "t03", "t03"]
    row = payload["summary"]["normal"]["citeformer-required"]
    assert (row["after_punctuation"]["k"], row["after_punctuation"]["n"]) == (2, 4)
    assert row["unsupported_numbers"] == 2
    assert row["repetition"]["k"] == 0
    assert payload["records"]["normal"][0]["unsupported_number_values"] == ["3.99"]
    assert {r.max_new_tokens for r in gen.fake.requests} == {SETTINGS.max_new_tokens}


def test_run_section_writes_one_quality_file_per_set() -> None:
    settings = replace(SETTINGS, questions=1, adversarial_questions=0)
    names = [name for name, _ in run.run_section(
        "quality", ScriptedGenerator(ANSWER), settings)]  # type: ignore[arg-type]
    assert names == ["quality", "quality_technical"]


def test_budget_counts_both_sets() -> None:
    assert run.budget(SETTINGS).startswith("plan: 16 answers x <= 24 tokens")


@pytest.mark.parametrize(("argv", "datasets", "max_new_tokens"), [
    ([], ("encyclopedic", "technical"), 64),
    (["--dataset", "technical"], ("technical",), 64),
    (["--dataset", "encyclopedic", "--max-new-tokens", "160"], ("encyclopedic",), 160),
    (["--quick"], ("encyclopedic", "technical"), 24),
    (["--quick", "--max-new-tokens", "100"], ("encyclopedic", "technical"), 100),
    (["--set", "max_new_tokens=48", "--max-new-tokens", "100"], ("encyclopedic", "technical"),
     100),
])
def test_settings_of_the_flags(
    argv: list[str], datasets: tuple[str, ...], max_new_tokens: int
) -> None:
    settings = run.settings_of(run.parse_args(argv))
    assert settings.datasets == datasets
    assert settings.max_new_tokens == max_new_tokens


@pytest.mark.parametrize("value", ["0", "-5", "many"])
def test_max_new_tokens_must_be_a_positive_integer(value: str) -> None:
    with pytest.raises(SystemExit):
        run.parse_args(["--max-new-tokens", value])


def test_output_paths(tmp_path: Path) -> None:
    assert run.output_paths(run.parse_args([])) == (run.HERE / "results",
                                                    run.HERE / "README.md")
    assert run.output_paths(run.parse_args(["--quick"]))[0] == run.HERE / "results" / "quick"
    assert run.output_paths(run.parse_args(["--results-dir", str(tmp_path)])) == (
        tmp_path, tmp_path / "README.md")


def test_rescore_and_report_into_a_results_dir(tmp_path: Path) -> None:
    payload = run.run_quality(ScriptedGenerator(ANSWER), SETTINGS,  # type: ignore[arg-type]
                              "technical")
    for record in payload["records"]["normal"]:
        del record["repetition"], record["groups_after_punctuation"]
    path = tmp_path / "quality_technical.json"
    path.write_text(json.dumps(payload), encoding="utf-8")
    run.main(["--rescore", "--results-dir", str(tmp_path)])
    rescored = json.loads(path.read_text(encoding="utf-8"))
    assert all("repetition" in r for r in rescored["records"]["normal"])
    assert rescored["summary"]["normal"]["unconstrained"]["after_punctuation"]["k"] == 2
    readme = (tmp_path / "README.md").read_text(encoding="utf-8")
    assert "### Readability, normal prompts, technical set (2 questions, test split" in readme
    assert (tmp_path / "quality_technical.png").is_file()
    assert not (tmp_path / "quality.json").exists()
