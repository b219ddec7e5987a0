"""The per-answer measurements of ``citebench.metrics`` and their aggregation."""

from __future__ import annotations

import pytest
from citebench.data import Item, Passage
from citebench.metrics import (
    cite_groups,
    contains_answer,
    follows_dangling_word,
    follows_punctuation,
    groups_after_dangling_word,
    groups_after_punctuation,
    groups_inside_open_spans,
    has_repeated_phrase,
    has_repetition,
    measure,
    numbers,
    reaches_word_bound,
    sentence_words,
    summarize,
    unsupported_numbers,
)

from citeformer.grammar import DEFAULT_MAX_SENTENCE_WORDS


@pytest.mark.parametrize(("text", "after"), [
    ("It iterates over a sequence, [1] which is a feature of loops [2].", 1),
    ("It iterates over a sequence,[1] which is a feature of loops [2].", 1),
    ("The suite runs as follows: [2] first the target is bound [2].", 1),
    ("It is cleared; [1][3] so rename it [1].", 1),
    ("It is cleared ([2]).", 1),
    # the group follows a word, however odd the sentence reads
    ("..., which is a feature of [4].", 0),
    ("Paris is the capital of France [1].", 0),
    ("The loop ends [1]. Then, it exits [2].", 0),
    # only one space is ignored
    ("It is cleared,  [1].", 0),
    ("No marker here, at all.", 0),
])
def test_groups_after_punctuation(text: str, after: int) -> None:
    assert groups_after_punctuation(text) == after


def test_a_group_of_several_markers_counts_once() -> None:
    text = "It ends, [1][2] and then [3] [4]."
    assert cite_groups(text) == [(9, 15), (25, 32)]
    assert groups_after_punctuation(text) == 1


def test_follows_punctuation_looks_just_before_the_group() -> None:
    text = "a, [1] b [2]"
    assert follows_punctuation(text, text.index("[1]"))
    assert not follows_punctuation(text, text.index("[2]"))


@pytest.mark.parametrize(("text", "dangling"), [
    ("..., which is a feature of [4].", 1),
    ("It is not available to the program during execution of the [1].", 1),
    ("It is executed immediately,and,in [1]. It is cleared and [2].", 2),
    ("Paris is the capital of France [1].", 0),
    ("It iterates over a sequence, [1] which is a feature of loops [2].", 0),
    ("Theory [1]. Often [2].", 0),
])
def test_groups_after_dangling_word(text: str, dangling: int) -> None:
    assert groups_after_dangling_word(text) == dangling


def test_follows_dangling_word_looks_at_the_whole_last_word() -> None:
    text = "bathe [1] then [2] the [3]"
    assert [follows_dangling_word(text, text.index(m)) for m in ("[1]", "[2]", "[3]")] == [
        False, False, True]


@pytest.mark.parametrize(("text", "repeats"), [
    ("Paris [1]. Paris [1].", True),
    ("Paris [1]. paris [2].", True),
    ("The loop ends when the iterator is exhausted [1]. "
     "So the loop ends when the iterator is exhausted [2].", True),
    ("The else clause runs when the loop ends [1]. It does not run after break [2].", False),
    # a repeated 4-gram is not a repeated 5-gram
    ("It is the default value [1]. That is the default value too [2].", False),
    ("", False),
])
def test_has_repetition(text: str, repeats: bool) -> None:
    assert has_repetition(text) is repeats


def test_repetition_is_stricter_than_the_four_gram_flag() -> None:
    text = "It is the default value [1]. That is the default value too [2]."
    assert has_repeated_phrase(text)
    assert not has_repetition(text)


def test_repetition_ignores_markers_between_words() -> None:
    assert has_repetition("one two three [1] four five. one two three [2] four five.")


def _sentence(words: int) -> str:
    return " ".join(f"w{k}" for k in range(words)) + " [1]."


@pytest.mark.parametrize(("sentence", "count"), [
    ("Paris is the capital [1].", 4),
    ("Paris is the capital [1][2] .", 4),
    ("Paris is the capital.", 4),
    ("x < y is chained [2].", 5),
    ("[1].", 0),
])
def test_sentence_words_counts_what_the_grammar_counts(sentence: str, count: int) -> None:
    assert sentence_words(sentence) == count


def test_reaches_word_bound_at_the_required_default() -> None:
    assert DEFAULT_MAX_SENTENCE_WORDS == 24
    assert reaches_word_bound(_sentence(24))
    assert not reaches_word_bound(_sentence(23))
    assert reaches_word_bound(_sentence(5), bound=5)


@pytest.mark.parametrize(("text", "found"), [
    ("It was completed in 1,889 [1].", {"1889"}),
    ("It was completed in 1889.", {"1889"}),
    ("Use 100_000 or 3.10, not 3.1.", {"100000", "3.10", "3.1"}),
    ("It returns 0.01 and -1.", {"0.01", "1"}),
    ("Compare (1,2) with 1,2345.", {"1", "2", "2345"}),
    ("It is true [4][12].", set()),
    ("Source 2 says so, as does source 3.", set()),
    ("x2 and utf-8 and 64-bit", {"8", "64"}),
])
def test_numbers(text: str, found: set[str]) -> None:
    assert numbers(text) == found


@pytest.mark.parametrize(("answer", "sources", "invented"), [
    ("It was completed in 1,889 [1].", ["The tower was completed in 1889."], []),
    ("It was completed in 1889 and opened in 1890 [1].", ["completed in 1889"], ["1890"]),
    ("1890 [1]. Again 1890, then 1891 [2].", ["no number"], ["1890", "1891"]),
    ("Since version 3.10 [1].", ["Changed in version 3.1: ..."], ["3.10"]),
    ('It returns 0.01 [2].', ['"10**-2" returns "0.01"'], []),
    ("It evaluates to -1 [1].", ['"-1**2" results in "-1".'], []),
    ("It is 8 bytes [1].", ["no number", "typically 8 bytes on 64-bit builds"], []),
    ("It is cited [3].", ["no number"], []),
])
def test_unsupported_numbers(answer: str, sources: list[str], invented: list[str]) -> None:
    assert unsupported_numbers(answer, sources) == invented


@pytest.mark.parametrize(("text", "answer", "correct"), [
    ("They return the last evaluated argument [1].", "last evaluated argument", True),
    ("They return the Last Evaluated Argument [1].", "last evaluated argument", True),
    ("It is supported since 3.10 [1].", "3.1", False),
    ("Raises a TypeErrors [1].", "TypeError", True),
    ("No answer here [1].", "3.10", False),
])
def test_correctness_is_the_gold_string_at_a_word_start(
    text: str, answer: str, correct: bool
) -> None:
    assert contains_answer(text, answer) is correct


ITEM = Item(
    id="t01",
    question="Since which version?",
    passages=(
        Passage("p1", "The with statement", "Changed in version 3.10: parentheses."),
        Passage("p2", "The try statement", "Changed in version 3.8: continue in finally."),
    ),
    gold_passages=frozenset({"p1"}),
    answer="3.10",
)


def test_measure_counts_the_new_failures_of_one_answer() -> None:
    text = ("Parentheses arrived in 3.10, [1] which came before 3.11 and [2]. "
            "Parentheses arrived in 3.10, [1] which came before 3.11 and [2].")
    record = measure(ITEM, text, "length")
    assert record["correct"]
    assert record["cut_off"]
    assert record["repetition"]
    assert (record["cite_groups"], record["groups_after_punctuation"]) == (4, 2)
    assert record["groups_after_dangling_word"] == 2
    assert record["unsupported_numbers"] == 1
    assert record["unsupported_number_values"] == ["3.11"]
    assert record["long_sentences"] == 0


def test_measure_of_a_clean_answer() -> None:
    record = measure(ITEM, "Since version 3.10 [1].", "stop")
    assert record["correct"] and record["cites_gold"]
    assert not record["cut_off"] and not record["repetition"]
    assert record["groups_after_punctuation"] == record["groups_after_dangling_word"] == 0
    assert record["unsupported_numbers"] == 0


def _record(text: str, finish_reason: str = "stop") -> dict[str, object]:
    return {**measure(ITEM, text, finish_reason), "error": None, "generated_tokens": 10,
            "seconds": 1.0}


def test_summarize_pools_the_new_measurements() -> None:
    records = [
        _record("It came in 3.10, [1] and in 3.9 [1]. It came in 3.10, [1] and in 3.9 [1].",
                "length"),
        _record("Since version 3.10 [1]."),
        {"error": "GrammarViolationError: ...", "seconds": 0.1},
    ]
    summary = summarize(records)
    assert summary["answers"] == 2 and summary["errors"] == 1
    assert summary["repetition"]["k"] == 1 and summary["repetition"]["n"] == 2
    assert (summary["after_punctuation"]["k"], summary["after_punctuation"]["n"]) == (2, 5)
    assert summary["after_dangling_word"]["k"] == 0
    assert summary["cut_off"]["k"] == 1
    assert summary["unsupported_numbers"] == 1
    assert summary["answers_with_unsupported_number"]["k"] == 1
    assert summary["correctness"]["k"] == 2
    assert summary["long_sentences"]["n"] == 3
    assert (summary["abstained"]["k"], summary["abstained"]["n"]) == (0, 2)
    refused = {**_record("The sources do not answer this question."), "abstained": True}
    assert summarize([refused, *records])["abstained"]["k"] == 1


@pytest.mark.parametrize(("text", "count"), [
    ('It is ("j" | [1].', 1),
    ("It is a TypeError (or any other type [1]. It is (x) [2].", 1),
    ("Use `x.join [1]. Use `x` [1].", 1),
    ('He said "no [1][2]. A (b. C [1].', 1),  # the second claim starts after "b. "
    ("Paris [1]. (Berlin) [2].", 0),
])
def test_groups_inside_open_spans(text: str, count: int) -> None:
    assert groups_inside_open_spans(text) == count
    assert measure(ITEM, text, "stop")["groups_in_open_spans"] == count


def test_claim_best_counts_markers_the_claims_own_words_point_to() -> None:
    # "parentheses" only occurs in p1, "finally" only in p2; "version" in both (a tie counts).
    text = "It allows parentheses [1]. It allows parentheses [2]. Continue in finally [2][1]."
    record = measure(ITEM, text, "stop")
    assert record["markers"] == 4 and record["claim_best"] == 2
    assert measure(ITEM, "A new version [1][2].", "stop")["claim_best"] == 2
    assert summarize([_record(text)])["claim_best"]["k"] == 2
