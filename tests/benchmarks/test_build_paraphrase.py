"""The builder of ``paraphrase.jsonl``: its word-overlap and name rules, what it refuses, that it
reproduces the committed file; and the committed file's rules."""

from __future__ import annotations

import importlib.metadata
import re

import build_paraphrase as builder
import pytest
from citebench.data import Item, load_dataset

from citeformer.errors import InvalidInputError
from tests.benchmarks.built_rules import check_built_item

Text = builder.Text


@pytest.mark.parametrize(("question", "golds", "share"), [
    ("When was the Eiffel Tower completed?", ["The Eiffel Tower was completed in 1889."], 1.0),
    ("Which tower was finished then?", ["The Eiffel Tower was completed in 1889."], 1 / 2),
    ("When was the iron landmark finished?", ["The Eiffel Tower was completed in 1889."], 0.0),
    ("Where was the inventor of the telephone born?",
     ["Bell patented the telephone.", "Bell was born in Edinburgh."], 2 / 3),
    ("What is it?", ["Anything at all."], 0.0),
])
def test_overlap_is_the_share_of_the_question_words_the_golds_hold(
        question: str, golds: list[str], share: float) -> None:
    assert builder.overlap(question, golds) == pytest.approx(share)


@pytest.mark.parametrize(("name", "text", "found"), [
    ("click.termui.pause", "The program waits for a key.", []),
    ("click.termui.pause", "It does nothing while pausing.", ["pausing"]),
    ("click.termui.launch", "This function launches the viewer.", ["launche"]),
    ("click.termui.progressbar", "It shows a progress bar.", ["progress bar"]),
    ("click.testing.CliRunner", "The runner is isolated.", ["runner"]),
    ("click.utils.echo", "Click writes to stdout.", ["click"]),
    # A word of the module's name counts only as it is: "terminal" is not "termui".
    ("click.termui.getchar", "Reads from the terminal.", []),
])
def test_named_words_finds_the_name_in_other_forms(name: str, text: str, found: list[str]) -> None:
    module = ".".join(name.split(".")[:2])
    assert builder.named_words(name, module, text) == found


TEXTS = {
    "getkey": Text("Fetches one press from the keyboard and hands it back.", "demo.keys",
                   "demo.keys.getkey"),
    "getkey-named": Text("The getkey function fetches one press.", "demo.keys",
                         "demo.keys.getkey"),
    "wait": Text("Stops until any button is pressed, then carries on.", "demo.keys",
                 "demo.keys.wait"),
    "beep": Text("Rings the keyboard bell once.", "demo.keys", "demo.keys.beep"),
    "q01/p1": Text("The tower in Paris was completed in 1889.", "Eiffel Tower", None),
    "q01/p2": Text("Big Ben was cast in 1858.", "Big Ben", None),
    "q01/p3": Text("The Leaning Tower of Pisa was completed in 1372.", "Leaning Tower of Pisa",
                   None),
}


@pytest.mark.parametrize("question", [
    builder.q("r01", "What does `demo.keys.getkey` return?", "one press", ["getkey"],
              ["wait", "beep"]),
    builder.q("r01", "When was the landmark in Paris finished?", "1889", ["q01/p1"],
              ["q01/p2", "q01/p3"]),
])
def test_check_question_accepts_a_good_one(question: builder.Question) -> None:
    builder.check_question(question, 1, TEXTS)


@pytest.mark.parametrize(("question", "message"), [
    (builder.q("r02", "What does `demo.keys.getkey` return?", "one press", ["getkey"],
               ["wait", "beep"]), "number the questions r01, r02"),
    (builder.q("r01", "What does `demo.keys.getkey` read?", "keyboard", ["getkey"],
               ["wait", "beep"]),
     r"question r01: the answer 'keyboard' is also in the distractors \['beep'\]"),
    (builder.q("r01", "Which press does `demo.keys.getkey` fetch from the keyboard and hand "
                      "back?", "one press", ["getkey"], ["wait", "beep"]),
     "question r01: its gold passages hold 50% of its content words"),
    # The title counts where titles tell the passages apart: "Eiffel" is only in the title.
    (builder.q("r01", "When was the Eiffel landmark in Paris finished?", "1889", ["q01/p1"],
               ["q01/p2", "q01/p3"]), "hold 50% of its content words"),
    (builder.q("r01", "What does `demo.keys.wait` return?", "one press", ["getkey"],
               ["wait", "beep"]), "does not name `demo.keys.getkey`"),
    (builder.q("r01", "What does `demo.keys.getkey` fetch?", "one press", ["getkey-named"],
               ["wait", "beep"]), r"repeats \['getkey'\] of the name"),
    (builder.q("r01", "When was the landmark finished?", "1889", ["q01/p1"],
               ["q01/p2", "beep"]), "mixes docstring and encyclopedic passages"),
])
def test_check_question_refuses(question: builder.Question, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        builder.check_question(question, 1, TEXTS)


@pytest.mark.parametrize(("text", "message"), [
    ("Short.", "has 6 characters"),
    ("A passage that cites a source such as [1] in its text.", "holds a square bracket"),
])
def test_check_short_passage_refuses(text: str, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        builder.check_short_passage("q01/p1", text)


def test_build_refuses_missing_docstrings() -> None:
    with pytest.raises(InvalidInputError, match="no docstring given for"):
        builder.build({}, builder.encyclopedic_texts())


@pytest.mark.skipif(importlib.metadata.version(builder.PACKAGE) != builder.VERSION,
                    reason=f"the set was cut from the docstrings of click {builder.VERSION}")
def test_the_committed_file_is_what_the_table_builds() -> None:
    rows = builder.build(builder.docstrings(), builder.encyclopedic_texts())
    assert builder.render(rows) == builder.OUTPUT.read_text(encoding="utf-8")
    assert [row["id"] for row in rows] == [q.id for q in builder.QUESTIONS]


PARAPHRASE = load_dataset("paraphrase")
ENCYCLOPEDIC = {q.id for q in builder.QUESTIONS if all("/" in name for name in q.gold)}


def test_paraphrase_set_size_ids_and_split() -> None:
    assert len(PARAPHRASE) >= 40
    assert 20 <= len(ENCYCLOPEDIC) <= len(PARAPHRASE) - 20
    assert [item.id for item in PARAPHRASE] == [f"r{k:02d}" for k in range(1, len(PARAPHRASE) + 1)]
    assert len({item.question for item in PARAPHRASE}) == len(PARAPHRASE)
    dev = [item.id for item in PARAPHRASE if item.split == "dev"]
    assert dev == [f"r{k:02d}" for k in range(1, len(PARAPHRASE) + 1, 3)]


@pytest.mark.parametrize("item", PARAPHRASE, ids=lambda item: item.id)
def test_paraphrase_question_follows_the_rules(item: Item) -> None:
    if item.id in ENCYCLOPEDIC:
        check_built_item(item, chars=builder.SHORT_CHARS)
    else:
        check_built_item(item)
        assert len({passage.title for passage in item.passages}) == 1


@pytest.mark.parametrize("item", PARAPHRASE, ids=lambda item: item.id)
def test_paraphrase_gold_passages_hold_few_question_words(item: Item) -> None:
    golds = [p for p in item.passages if p.id in item.gold_passages]
    counted = [f"{p.title} {p.text}" if item.id in ENCYCLOPEDIC else p.text for p in golds]
    assert builder.overlap(item.question, counted) <= builder.MAX_SHARE
    if item.id not in ENCYCLOPEDIC:
        named = re.search(r"`(click\.[\w.]+)`", item.question)
        assert named is not None
        for gold in golds:
            assert builder.named_words(named.group(1), gold.title, gold.text) == []


def test_paraphrase_gold_passage_is_not_always_first() -> None:
    first = sum("p1" in item.gold_passages for item in PARAPHRASE)
    assert 0 < first < len(PARAPHRASE) / 2
