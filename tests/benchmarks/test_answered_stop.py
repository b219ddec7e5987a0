"""benchmarks/answered_stop.py: where each rule would end a stored answer."""

from __future__ import annotations

import json
from pathlib import Path

import answered_stop
import pytest
from answered_stop import RULES, cited_sentences, cut, main
from citebench.data import Item, Passage, load_dataset

ITEM = Item(
    id="e01",
    question="When was the Eiffel Tower finished?",
    passages=(
        Passage("p1", "Eiffel Tower", "The Eiffel Tower in Paris was completed in 1889."),
        Passage("p2", "Louvre", "The Louvre is a museum in Paris."),
    ),
    gold_passages=frozenset({"p1"}),
    answer="1889",
)
ANSWER = (
    "The Eiffel Tower was finished [1]. It was completed in 1889 [1][2]. "
    "It was completed in the year 1889 [1]. The Louvre is a museum [2]."
)


def test_each_cited_sentence_ends_after_its_terminator_and_cites_its_claim() -> None:
    sentences = cited_sentences(ANSWER)
    assert [claim for _, claim in sentences] == [
        "The Eiffel Tower was finished", "It was completed in 1889",
        "It was completed in the year 1889", "The Louvre is a museum",
    ]
    assert ANSWER[: sentences[1][0]].endswith("1889 [1][2].")


def test_the_rules_end_the_answer_where_it_has_answered_or_starts_to_restate() -> None:
    assert cut(ITEM, ANSWER, RULES["first"]) == "The Eiffel Tower was finished [1]."
    # "finished" restates the question; "completed" and "1889" are new and in the sources.
    ended = "The Eiffel Tower was finished [1]. It was completed in 1889 [1][2]."
    assert cut(ITEM, ANSWER, RULES["new-words-2"]) == ended
    assert cut(ITEM, ANSWER, RULES["restated"]) == ended  # the third says the second again
    assert cut(ITEM, ANSWER, RULES["new-words-3"]) == ANSWER  # no sentence holds three
    assert cut(ITEM, "No marker here.", RULES["first"]) == "No marker here."


def test_the_table_is_written_for_every_set_and_rule(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    item = next(i for i in load_dataset("paraphrase") if i.id == "r25")
    text = f"It is {item.answer} [1]. It is {item.answer} again [2]."
    record = {"item": item.id, "text": text, "abstained": False, "cut_off": False}
    stored = {"split": "dev", "sets": {"paraphrase": {"no-refusal": {"records": [record]}}}}
    (tmp_path / "stored.json").write_text(json.dumps(stored))
    monkeypatch.setattr(answered_stop, "RESULTS", tmp_path)
    main(["--answers", "stored.json"])
    table = json.loads((tmp_path / "answered_stop_dev.json").read_text())
    line = table["sets"]["paraphrase"]
    assert list(line) == ["as written", *RULES]
    assert line["as written"]["markers"] == 2 and line["first"]["markers"] == 1
    assert line["first"]["correctness"]["value"] == 1.0
