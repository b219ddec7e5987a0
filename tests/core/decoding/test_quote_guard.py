"""Verbatim quotes: the substring automaton, the quote guard and its token mask, the GBNF form,
and locating quotes in an answer. Both enforcement forms are checked against the same tables."""

from __future__ import annotations

import functools
import re

import pytest
import xgrammar as xgr
from hypothesis import given, settings
from hypothesis import strategies as st
from xgrammar.testing import _is_grammar_accept_string

from citeformer import GrammarViolationError, Policy, Source, build_grammar
from citeformer.decoding.quote_guard import QuoteGuard
from citeformer.decoding.vocab import SortedVocab
from citeformer.grammar.automata import QuotableText, SuffixAutomaton
from citeformer.grammar.quotes import find_quotes, trim_open_quote

SOURCES = (
    Source("The Eiffel Tower was completed in 1889 for the World's Fair."),
    Source("Gustave Eiffel's company\n  designed and built   the tower.\n\nIt is 330 m tall."),
    Source('A source with "its own quotes" and [brackets] in it.'),
)


def _substrings(text: str) -> set[str]:
    return {text[i:j] for i in range(len(text)) for j in range(i + 1, len(text) + 1)}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(alphabet="abc ", min_size=1, max_size=12), min_size=1, max_size=3),
       st.text(alphabet="abc ", min_size=1, max_size=8))
def test_automaton_accepts_exactly_the_substrings(segments: list[str], probe: str) -> None:
    automaton = SuffixAutomaton([ord(c) for c in s] for s in segments)
    state: int | None = 0
    for char in probe:
        state = automaton.next[state].get(ord(char)) if state is not None else None
    assert (state is not None) == any(probe in s for s in segments)


def test_reach_is_the_longest_continuation() -> None:
    automaton = SuffixAutomaton([[ord(c) for c in "abcab"]])
    reach = automaton.reach()
    assert reach[0] == 5
    state = automaton.next[automaton.next[0][ord("a")]][ord("b")]
    assert reach[state] == 3  # "ab" continues as "cab"


def test_folding_maps_back_to_the_original_text() -> None:
    original = SOURCES[1].text
    quotable = QuotableText.fold(original, 2000)
    assert quotable.text == (
        "Gustave Eiffel's company designed and built the tower. It is 330 m tall."
    )
    start, end = quotable.locate("company designed and built the")  # type: ignore[misc]
    assert original[start:end] == "company\n  designed and built   the"
    assert quotable.locate("company  designed") is None
    assert quotable.locate("") is None
    assert QuotableText.fold(original, 10).text == "Gustave Ei"


# (answer, accepted) for the three SOURCES; both enforcement forms must agree with each row.
VERBATIM = [
    ('It was "completed in 1889" [1].', True),
    ('It was "completed in 1889"[1].', True),
    ('It was "completed in 1889" [2].', False),  # source 2 does not hold it
    ('It was "completed in 1888" [1].', False),  # one character changed
    ('It was "finished in 1889" [1].', False),  # one word changed
    ('"designed and built the tower" [2] by Eiffel.', True),  # white space runs fold
    ('"designed  and built" [2]', False),  # two spaces are not in the folded text
    ('"tower. It is 330 m" [2] tall.', True),  # a paragraph break is one space
    ('"its own quotes" [3]', True),  # the text between a source's own quote marks
    ('"A source with " [3] quotes.', True),  # ... but may stop before one
    ('"and " [3] brackets.', True),
    ('" with" [3]', False),  # no leading space
    ('"Tower" [1][2]', False),  # one marker per quote
    ('"the World" [1]', True),
    ('"the Wor" [1]', False),  # a quote ends at a word boundary ...
    ('"ompleted in" [1]', False),  # ... and begins at one
    ('"s Fair." [1]', True),  # an apostrophe is a boundary
    ('"1889 for" [1]', True),
    ('"18" [1]', False),
    ('"Tower" [1] and "Eiffel" [2].', True),
    ('"Tower" [4]', False),
    ('"Tower"', False),  # a quote is always cited
    ('The tower is tall [2].', True),  # prose and markers stay free
    ('The "tower is tall" [2].', False),
]


@functools.cache
def _verbatim_grammar(min_quote_chars: int, quotable_chars: int) -> xgr.Grammar:
    text = build_grammar(
        3, Policy.QUOTES_ONLY, quote_sources=SOURCES,
        min_quote_chars=min_quote_chars, quotable_chars=quotable_chars,
    )
    return xgr.Grammar.from_ebnf(text)


@functools.cache
def _shape_grammar() -> xgr.Grammar:
    return xgr.Grammar.from_ebnf(build_grammar(3, Policy.QUOTES_ONLY))


def gbnf_accepts(text: str, min_quote_chars: int = 1, quotable_chars: int = 2000) -> bool:
    return bool(_is_grammar_accept_string(_verbatim_grammar(min_quote_chars, quotable_chars), text))


def guard_accepts(text: str, min_quote_chars: int = 1, quotable_chars: int = 2000) -> bool:
    # Local generation: the shape grammar's mask, then the guard's.
    guard = QuoteGuard(
        SOURCES, SortedVocab([]), min_quote_chars=min_quote_chars, quotable_chars=quotable_chars
    )
    end = guard.run(("out",), text.encode())
    return (
        end is not None and end[0] in ("out", "cited")
        and bool(_is_grammar_accept_string(_shape_grammar(), text))
    )


@pytest.mark.parametrize("accepts", [gbnf_accepts, guard_accepts], ids=["gbnf", "guard"])
@pytest.mark.parametrize(("text", "expected"), VERBATIM)
def test_verbatim_table(accepts, text: str, expected: bool) -> None:  # type: ignore[no-untyped-def]
    assert accepts(text) is expected


@pytest.mark.parametrize("accepts", [gbnf_accepts, guard_accepts], ids=["gbnf", "guard"])
@pytest.mark.parametrize(("text", "min_chars", "cap", "expected"), [
    ('"Tower" [1]', 5, 2000, True),
    ('"Tower" [1]', 6, 2000, False),
    ('"The Eiffel" [1]', 1, 10, True),
    ('"The Eiffel T" [1]', 1, 10, False),  # past the quotable part of the source
    ('"It is 330 m tall." [2]', 1, 2000, True),
])
def test_quote_options(accepts, text: str, min_chars: int, cap: int, expected: bool) -> None:  # type: ignore[no-untyped-def]
    assert accepts(text, min_chars, cap) is expected


def test_unquotable_sources_leave_prose_and_markers() -> None:
    # The source holds no 4 characters without a bracket: nothing can be quoted.
    text = build_grammar(1, Policy.QUOTES_ONLY, quote_sources=["ab [x] cd"], min_quote_chars=4)
    grammar = xgr.Grammar.from_ebnf(text)
    assert _is_grammar_accept_string(grammar, "Paris is big [1].")
    assert not _is_grammar_accept_string(grammar, '"ab " [1]')
    guard = QuoteGuard([Source("ab [x] cd")], SortedVocab([]), min_quote_chars=4)
    assert guard.run(("out",), b'"') is None


def test_quote_sources_must_match_the_source_count() -> None:
    with pytest.raises(ValueError, match="quote_sources holds 2 texts but n_sources is 3"):
        build_grammar(3, Policy.QUOTES_ONLY, quote_sources=["a", "b"])


@pytest.mark.parametrize(("options", "message"), [
    ({"min_quote_chars": 0}, "min_quote_chars must be a positive int"),
    ({"quotable_chars": -1}, "quotable_chars must be a positive int"),
    ({"verbatim_quotes": "yes"}, "verbatim_quotes must be True or False"),
    ({"min_quote_chars": 400}, r"min_quote_chars \(400\) is larger than max_quote_chars \(300\)"),
])
def test_bad_quote_options(options: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build_grammar(3, Policy.QUOTES_ONLY, **options)  # type: ignore[arg-type]


# A toy vocabulary with the token shapes that matter: quote marks glued to words and markers,
# multi-byte characters split across tokens, spaces before and inside words.
TOY_TOKENS = [
    *(bytes([b]) for b in range(32, 127)),
    b" ", b"  ", b"\n", b' "', b'"', b'."', b'" [', b'"[', b'" [1', b"[1]", b"].", b"][",
    b"The", b" Eiffel", b" Tower", b" tower", b" was", b" completed", b" in", b" 1889", b"18",
    b"89", b" designed", b" and", b" built", b" the", b"Eif", b"fel", b" It", b" is", b" 330",
    b" m", b" tall", b"\xc3", b"\xa9", b"caf\xc3\xa9", b"\xc3\xa9t\xc3\xa9", b"", b"<eos>",
]
ACCENTED = (Source("Le café était plein."), Source("L'été est chaud."))


def _brute_force(guard: QuoteGuard, vocab: SortedVocab) -> set[int]:
    return {
        i for i, token in enumerate(vocab.token_bytes)
        if token and guard.run(guard.state, token) is not None
    }


def _allowed(guard: QuoteGuard, vocab: SortedVocab) -> set[int]:
    mask = guard.mask()
    if mask.allow:
        return set(mask.ids)
    return {i for i, t in enumerate(vocab.token_bytes) if t} - set(mask.ids)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_mask_equals_checking_every_token(data: st.DataObject) -> None:
    # The mask walks the sorted vocabulary with the automata; along a random walk of allowed
    # tokens it must equal running the guard over every token of the vocabulary.
    sources = data.draw(st.sampled_from([SOURCES, ACCENTED]))
    min_chars = data.draw(st.integers(1, 6))
    vocab = SortedVocab(TOY_TOKENS)
    guard = QuoteGuard(sources, vocab, min_quote_chars=min_chars)
    for _ in range(25):
        allowed = _allowed(guard, vocab)
        assert allowed == _brute_force(guard, vocab), guard.state
        if not allowed:
            break
        guard.advance(data.draw(st.sampled_from(sorted(allowed))))


def test_guard_refuses_a_token_the_mask_removed() -> None:
    vocab = SortedVocab(TOY_TOKENS)
    guard = QuoteGuard(SOURCES, vocab)
    guard.advance(TOY_TOKENS.index(b' "'))
    assert guard.state[0] == "in"
    with pytest.raises(GrammarViolationError, match="breaks a verbatim quote"):
        guard.advance(TOY_TOKENS.index(b" tall"))  # no source has a quote starting " tall"


def test_a_quote_that_cannot_reach_the_minimum_is_never_opened() -> None:
    # "Le" occurs only where it cannot grow to 30 characters within one segment: no dead end.
    guard = QuoteGuard([Source('Le "x" fin.')], SortedVocab(TOY_TOKENS), min_quote_chars=30)
    assert guard.run(("out",), b'"') is None


def test_find_quotes_locates_each_quote_in_its_source() -> None:
    text = 'Eiffel\'s firm "designed and built the tower" [2] in "1889" [1].'
    quotes = find_quotes(text, SOURCES)
    assert [q.text for q in quotes] == ["designed and built the tower", "1889"]
    first = quotes[0]
    assert (first.source_id, first.start, first.end) == (2, 15, 43)
    assert text[first.start:first.end] == first.text
    assert SOURCES[1].text[first.source_start:first.source_end] == (
        "designed and built   the tower"
    )


@pytest.mark.parametrize(("text", "message"), [
    ('It was "finished in 1889" [1].', "does not occur in source 1"),
    ('"Tower" [4]', "only 3 source"),
    ('A "dangling quote', "does not open a cited quote"),
    ('"Tower" [1] and "Eiffel".', "does not open a cited quote"),
])
def test_find_quotes_rejects_what_the_guard_forbids(text: str, message: str) -> None:
    with pytest.raises(GrammarViolationError, match=message):
        find_quotes(text, SOURCES)


@pytest.mark.parametrize(("text", "trimmed"), [
    ('It is "a turning', "It is"),
    ('It is "a turning point" [', "It is"),
    ('It is "a turning point"', "It is"),
    ('It is "a turning point" [2] and "more', 'It is "a turning point" [2] and'),
    ('It is "a turning point" [2].', 'It is "a turning point" [2].'),
])
def test_trim_open_quote(text: str, trimmed: str) -> None:
    assert trim_open_quote(text) == trimmed


def test_quote_rules_spell_the_minimum_as_literals() -> None:
    # Quotes begin after a boundary: "ab", "cd" and "a " (of "a b"), but not "bc" or ", ".
    text = build_grammar(1, Policy.QUOTES_ONLY, quote_sources=["abc, cd a b"], min_quote_chars=2)
    heads = re.search(r"^quote-1 ::= (.*)$", text, re.MULTILINE)
    assert heads is not None
    assert sorted(re.findall(r'"(.{2})" quote', heads.group(1))) == ["a ", "ab", "cd"]
