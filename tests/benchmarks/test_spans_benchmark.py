"""benchmarks/spans.py: span measures from stored answers, with hand-made items; offline."""

from __future__ import annotations

import json
from pathlib import Path

from citebench.data import Item, Passage
from spans import measure, stored_answers

ITEM = Item(
    id="q01",
    question="When was the tower completed?",
    passages=(
        Passage("a", "Tower", "The tower is tall. It was completed in 1889 by Eiffel."),
        Passage("b", "Bees", "Bees dance."),
    ),
    gold_passages=frozenset({"a"}),
    answer="1889",
)


def test_measure_counts_gold_spans_holding_the_answer() -> None:
    answers = [("encyclopedic", "q01", "It was completed in 1889 [1]. The tower is tall [1][2].")]
    result = measure(answers, {"q01": ITEM})
    assert (result["answers"], result["citations"], result["gold_citations"]) == (1, 3, 2)
    # The second claim's span is "The tower is tall.", which does not hold "1889".
    assert result["gold_span_has_answer"] == {"value": 0.5, "k": 1, "n": 2}
    assert result["gold_passage_has_answer"]["value"] == 1.0
    assert result["scores"]["weak_share"]["0.35"]["non_gold"] == {"value": 1.0, "k": 1, "n": 1}
    assert result["ms_per_citation"]["median"] > 0


def test_stored_answers_reads_the_first_file_there_is(tmp_path: Path) -> None:
    records = [{"item": "t03", "text": "A [1].", "error": None},
               {"item": "q01", "text": "B [1].", "error": None, "attack": "inject_99"}]
    (tmp_path / "quality.json").write_text(json.dumps({"records": {"normal": records}}))
    sets = {"technical": {"default": {"records": records[:1] * 2}}}
    (tmp_path / "readability_dev.json").write_text(json.dumps({"sets": sets}))
    assert stored_answers(tmp_path) == ("readability_dev.json", [("technical", "t03", "A [1].")])
    # The attacked answer is left out: its passages are not the stored item's.
    assert stored_answers(tmp_path, ["quality.json"]) == (
        "quality.json", [("technical", "t03", "A [1].")]
    )


# Measured on the stored held-out answers (results/readability_test.json, the distinct answers of
# every citeformer arm; `python benchmarks/spans.py --answers readability_test.json`): of the
# gold citations whose passage holds the gold answer (the most a span can reach), the span holds
# it in 100% (29/29) of the encyclopedic set and 77% (98/128) of the technical one, where a claim
# often does not state the answer the passage holds elsewhere (the span follows the claim's
# words). The floors sit a little below.
SPAN_FLOORS = {"encyclopedic": 0.95, "technical": 0.65}


def test_spans_of_the_held_out_answers_hold_the_gold_answer() -> None:
    from citebench.data import load_dataset

    name, answers = stored_answers(names=["readability_test.json"])
    assert name == "readability_test.json"
    for dataset, floor in SPAN_FLOORS.items():
        items = {item.id: item for item in load_dataset(dataset)}
        mine = [a for a in answers if a[0] == dataset]
        assert all(items[item_id].split == "test" for _, item_id, _ in mine)
        result = measure(mine, items)
        span, passage = result["gold_span_has_answer"], result["gold_passage_has_answer"]
        assert passage["k"] >= 25, passage  # enough gold citations to mean something
        assert span["k"] >= floor * passage["k"], (dataset, span, passage)
