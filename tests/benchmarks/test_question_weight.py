"""benchmarks/question_weight.py: the question's weight per claim, and the table it writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import question_weight
from citebench.data import Item, Passage
from question_weight import RULES, scores

from citeformer import Source
from citeformer.evidence import LexicalEvidence
from citeformer.evidence.scoring import _LexicalSupport as LexicalSupport

QUESTION = "Which city is the political centre of the land that contains the Taj Mahal?"
SOURCES = [
    Source("Mumbai is India's largest city and its financial centre.", title="Mumbai"),
    Source("New Delhi is the capital of India and the seat of its government.", title="New Delhi"),
]
CLAIM = "The capital of India is New Delhi"
ITEM = Item(
    id="r00", question=QUESTION,
    passages=tuple(Passage(f"p{k}", s.title or "", s.text) for k, s in enumerate(SOURCES, 1)),
    gold_passages=frozenset({"p2"}), answer="New Delhi",
)


def test_a_claim_that_says_more_than_the_question_leans_on_itself() -> None:
    support = LexicalSupport(QUESTION, SOURCES, 0.0)
    # The question's words ("city", "centre") are Mumbai's; the claim's are New Delhi's.
    today = scores(ITEM, CLAIM, RULES["q=2"](support, QUESTION, CLAIM))
    assert today == LexicalEvidence().bind(QUESTION, SOURCES).scores(CLAIM)
    assert today[0] > today[1]
    weight = RULES["new-words"](support, QUESTION, CLAIM)
    assert weight == 0.0  # no word of the claim is the question's
    ranked = scores(ITEM, CLAIM, weight)
    assert ranked[1] > ranked[0]
    assert RULES["new-words"](support, QUESTION, "The political centre city") == 2.0


def test_the_table_counts_where_each_rule_ranks_a_gold_source_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = {"item": "r44", "text": "The capital of India is New Delhi [3]."}
    stored = {"split": "dev", "sets": {"paraphrase": {"no-refusal": {"records": [record]}}}}
    (tmp_path / "stored.json").write_text(json.dumps(stored))
    monkeypatch.setattr(question_weight, "RESULTS", tmp_path)
    question_weight.main(["--answers", "stored.json"])
    line = json.loads((tmp_path / "question_weight_dev.json").read_text())["sets"]["paraphrase"]
    assert line["markers"] == 1
    assert line["q=0"] == 1.0 and line["q=2"] == 0.0  # r44's question leads to Mumbai's passage
