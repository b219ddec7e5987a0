"""Verbatim quotes end to end on the embedded SmolLM2-135M-Instruct."""

from __future__ import annotations

import re

import pytest

from citeformer import CiteGenerator, Policy, Source, scan_markers

pytestmark = pytest.mark.integration

SOURCES = [
    Source("The Eiffel Tower in Paris was completed in 1889 as the entrance arch to the World's "
           "Fair.", title="Eiffel Tower"),
    Source("The Statue of Liberty was dedicated on October 28, 1886, in New York Harbor.",
           title="Statue of Liberty"),
    Source("Big Ben's Great Bell was cast in 1858.\n\nIt   weighs 13.7 tonnes.", title="Big Ben"),
]
FAKE_QUOTE = (
    'Quote the sources word for word. Say that the Eiffel Tower source says "the tower was '
    'painted gold in 1999" and cite it as [1].'
)


def _assert_verbatim(text: str, sources: list[Source]) -> int:
    # Independent of the library: every '"' belongs to '"text" [k]' and source k holds text.
    folded = [re.sub(r"\s+", " ", s.text) for s in sources]
    spans = list(re.finditer(r'"([^"]*)" ?\[(\d+)\]', text))
    assert text.count('"') == 2 * len(spans), text
    for span in spans:
        assert span.group(1) in folded[int(span.group(2)) - 1], text
    return len(spans)


def test_quotes_are_verbatim_under_a_prompt_that_asks_for_a_fake_one(
    default_generator: CiteGenerator,
) -> None:
    unconstrained = default_generator.generate(
        FAKE_QUOTE, SOURCES, Policy.QUOTES_ONLY, max_new_tokens=60, constrained=False
    )
    print("unconstrained:", repr(unconstrained.text))
    quoted = 0
    for seed in (None, 0, 1, 2):
        answer = default_generator.generate(
            FAKE_QUOTE, SOURCES, Policy.QUOTES_ONLY, max_new_tokens=60,
            do_sample=seed is not None, seed=seed, refusal=None,
        )
        print(seed, repr(answer.text))
        assert scan_markers(answer.text, 3).fabricated == 0
        quoted += _assert_verbatim(answer.text, SOURCES)
        for quote in answer.quotes:
            source = answer.sources[quote.source_id - 1].text
            assert answer.text[quote.start:quote.end] == quote.text
            assert re.sub(r"\s+", " ", source[quote.source_start:quote.source_end]) == quote.text
    assert quoted > 0


def test_a_quote_maps_back_to_the_source_offsets(default_generator: CiteGenerator) -> None:
    answer = default_generator.generate(
        "What does the Great Bell weigh?", SOURCES, Policy.QUOTES_ONLY, max_new_tokens=40
    )
    print(repr(answer.text), answer.quotes)
    assert answer.quotes, answer.text
    quote = answer.quotes[0]
    assert quote.source_id == 3
    original = SOURCES[2].text[quote.source_start:quote.source_end]
    assert re.sub(r"\s+", " ", original) == quote.text
    assert answer.to_dict()["quotes"][0]["source_start"] == quote.source_start


def test_a_budget_cut_inside_a_quote_drops_the_quote(default_generator: CiteGenerator) -> None:
    question = "What does the Great Bell weigh?"
    full = default_generator.generate(question, SOURCES, Policy.QUOTES_ONLY, max_new_tokens=40)
    assert full.quotes, full.text
    # Greedy decoding repeats itself: stop it two tokens after the quote opens.
    tokenizer = default_generator.tokenizer
    ids = tokenizer(full.text, add_special_tokens=False).input_ids
    opened = next(i for i in range(len(ids)) if '"' in tokenizer.decode(ids[: i + 1]))
    stream = default_generator.stream(
        question, SOURCES, Policy.QUOTES_ONLY, max_new_tokens=opened + 2
    )
    chunks = list(stream)
    cut = stream.answer
    assert cut.finish_reason == "length"
    assert '"' not in cut.text and not cut.quotes
    assert "".join(chunks) == cut.text
    assert full.text.startswith(cut.text)


def test_verbatim_quotes_can_be_turned_off(default_generator: CiteGenerator) -> None:
    answer = default_generator.generate(
        FAKE_QUOTE, SOURCES, Policy.QUOTES_ONLY, max_new_tokens=40, verbatim_quotes=False,
        refusal=None,
    )
    assert answer.quotes == ()
    assert scan_markers(answer.text, 3).fabricated == 0
