"""The builder of the answerability reader's training questions: templates and near misses."""

from __future__ import annotations

import random

import answerability_data as builder
import pytest

SENTENCE = "The cargo build command compiles the current package and all of its dependencies."


def test_a_question_replaces_its_answer_span_and_never_holds_it() -> None:
    made_count = 0
    for seed in range(40):
        for recipe in (1, 2):
            made = builder.make_question(SENTENCE, "cargo(1)", random.Random(seed), recipe)
            if made is None:  # an answer span of stopwords only ("The") is not asked about
                continue
            made_count += 1
            question, answer = made
            assert question.endswith("?")
            assert answer.lower() in SENTENCE.lower()
            assert answer.lower() not in question.lower(), (question, answer)
            assert "what" in question.lower()
    assert made_count >= 60


def test_recipe_two_keeps_fewer_of_the_sentences_words() -> None:
    def kept(recipe: int) -> float:
        made = [builder.make_question(SENTENCE, "cargo(1)", random.Random(seed), recipe)
                for seed in range(60)]
        counts = [len(m[0].split()) for m in made if m is not None]
        return sum(counts) / len(counts)

    assert kept(2) < kept(1)


@pytest.mark.parametrize("sentence", ["Too short.", " ".join(["word"] * 45) + "."])
def test_a_sentence_too_short_or_too_long_gives_no_question(sentence: str) -> None:
    assert builder.make_question(sentence, "x", random.Random(0), 1) is None


def test_a_swapped_key_word_is_replaced_as_a_word_only() -> None:
    text = "Use ls to list; ls -l is long. Tools like lsblk stay, as does os.ls."
    assert builder.swapped(text, "ls", "grep") == (
        "Use grep to list; grep -l is long. Tools like lsblk stay, as does os.ls.")
    assert builder.swapped("Call LS now.", "ls", "dir") == "Call dir now."


def test_paragraphs_are_packed_into_passages_of_bounded_size() -> None:
    paragraphs = [f"Paragraph {i} says something useful about the tool. " * 3 for i in range(12)]
    passages = builder.pack(paragraphs)
    assert passages and all(
        builder.MIN_CHARS <= len(p) <= builder.MAX_CHARS + 200 for p in passages)
    assert builder.pack(["short"]) == []
