"""The word bounds in the bitmask: with the unbounded grammar, exactly the bounded grammar's tokens.

Random walks through the ``REQUIRED`` grammar (drawn toward its dotted terms half the time) with
a short word bound and few words a sentence, on a toy vocabulary and on real tokenizers: at every
step the bitmask of the grammar with ``char{1,N}``, ``word (" " word){0,W-1}`` and ``{0,8}``
around each term must equal the one of the local grammar (``char+``, no word count, ``char*``
around terms, one run of characters where no term is) restricted by ``WordBound``, bit for bit,
an offered refusal included.
"""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np
import pytest
import xgrammar as xgr

from citeformer import GrammarViolationError, build_request
from citeformer.decoding.steering import local_grammar, steering_for
from citeformer.decoding.vocab import Vocabulary
from citeformer.decoding.word_bound import (
    WordBound,
    bounds_words,
    counts_words,
    word_bound_for,
)
from citeformer.evidence.refusal import Refusal
from citeformer.grammar.rules import TERM_EDGE_CHARS
from tests.vocab import FAMILIES, family_tokenizer

QUESTION = "What does str.join or v3.8 hold?"
SOURCES = ["An os.path.join is documented; 3.8 added it.", "Plain words only here."]
LONG_TERM = "A longishnamedmodule.attr is documented."
TOY = [
    "<eos>", "a", "b", "ab", "abc", "abcd", "abcdefgh", " ", " a", " ab", " abcdef", "[", " [",
    "1", "2", "]", "].", ".", "!", "(", "((((", "str", ".join", "os", ".path", ".j", "3", ".8",
    "v", "é", "\xe9t\xe9", "a b", "ab cdefghij", "x" * 12, " " + "y" * 10, "s.join(", "ab.",
    "]. A", "]. a b", " a b c", " [1", "][", "The", " sources", " do", " not", " say", ".",
    "joinxyz", "inabcdefg", ".8abcdefghi", "8abcd", "xyz ", "str.", "s.joinabcdefgh",
]
OFFERED = Refusal(text="The sources do not say.", threshold=0, offer_below=math.inf)
"""A refusal every answer may choose, of 5 words."""


def requests(max_word_chars: int, max_sentence_words: int = 24) -> list[Any]:
    def build(**options: Any) -> Any:
        return build_request(
            QUESTION, SOURCES, max_word_chars=max_word_chars,
            max_sentence_words=max_sentence_words, **options,
        )

    built = [build(source_terms=False)]
    if max_word_chars >= len("sources"):  # the refusal's longest word
        built.append(build(source_terms=False, refusal=OFFERED))
    if max_word_chars - TERM_EDGE_CHARS >= 3:  # the terms' first parts: str, os, 3 and v3
        built.append(build())
    assert all(bounds_words(request) for request in built)
    return built


def bits(bitmask: Any, size: int) -> np.ndarray:
    """One bitmask row as a bool per token id (the padding past the vocabulary left out)."""
    return np.unpackbits(bitmask.numpy()[0].view(np.uint8), bitorder="little")[:size].astype(bool)


def walks(
    info: xgr.TokenizerInfo, max_word_chars: int, seeds: int, steps: int,
    max_sentence_words: int = 24,
) -> int:
    """``walk`` from several seeds for each of ``requests``; the steps compared in all."""
    compiler = xgr.GrammarCompiler(info)
    vocab = Vocabulary(info.decoded_vocab)
    compared = 0
    for request in requests(max_word_chars, max_sentence_words):
        bounded = compiler.compile_grammar(request.grammar_text(spell_quotes=False))
        local = compiler.compile_grammar(local_grammar(request))
        for seed in range(seeds):
            compared += walk(info, vocab, request, (bounded, local), seed, steps)
    return compared


def walk(
    info: xgr.TokenizerInfo, vocab: Vocabulary, request: Any, grammars: tuple[Any, Any],
    seed: int, steps: int,
) -> int:
    """Walk the bounded grammar at random; return the steps whose masks were compared."""
    bounded, local = (xgr.GrammarMatcher(grammar) for grammar in grammars)
    bound = word_bound_for(request, vocab, info.stop_token_ids)
    assert bound is not None and (bound.max_words is not None) == counts_words(request)
    want = xgr.allocate_token_bitmask(1, info.vocab_size)
    got = xgr.allocate_token_bitmask(1, info.vocab_size)
    rng = random.Random(seed)
    stops = list(info.stop_token_ids)
    spaceless = np.array([b" " not in raw for raw in vocab.token_bytes[: info.vocab_size]])
    dotted = np.array([b"." in raw for raw in vocab.token_bytes[: info.vocab_size]])
    heads = {term.encode()[:end] for term in request.terms for end in range(1, len(term))}
    leading = np.array([raw in heads for raw in vocab.token_bytes[: info.vocab_size]])
    compared = 0
    for _ in range(steps):
        bounded.fill_next_token_bitmask(want)
        local.fill_next_token_bitmask(got)
        bound.restrict(got.numpy()[0])
        expected, found = bits(want, info.vocab_size), bits(got, info.vocab_size)
        differ = np.flatnonzero(expected != found)
        assert not differ.size, (
            f"masks differ after the word {bound._word!r} ({bound.words} words): tokens "
            f"{[(int(t), vocab.token_bytes[t], bool(expected[t])) for t in differ[:5]]}"
        )
        compared += 1
        expected[stops] = False
        # Prefer long words: a token without a space three times in four.
        glued = np.flatnonzero(expected & spaceless)
        allowed = glued if glued.size and rng.random() < 0.75 else np.flatnonzero(expected)
        # Toward a dotted term and into it, half the time: its edges are bounded too.
        into_term = np.flatnonzero(expected & ((spaceless & dotted) | leading))
        if into_term.size and rng.random() < 0.5:
            allowed = into_term
        if not allowed.size:
            break
        token = int(allowed[rng.randrange(allowed.size)])
        assert bounded.accept_token(token) and local.accept_token(token)
        bound.advance(token)
    return compared


@pytest.mark.parametrize(
    ("max_word_chars", "max_sentence_words"), [(3, 24), (6, 2), (8, 6), (12, 3)]
)
def test_toy_vocabulary_masks_equal_the_bounded_grammar(
    max_word_chars: int, max_sentence_words: int
) -> None:
    info = xgr.TokenizerInfo(TOY, stop_token_ids=[0])
    assert walks(info, max_word_chars, 12, 80, max_sentence_words) > 500


def test_a_token_past_the_bound_is_refused_when_advanced() -> None:
    vocab = Vocabulary([raw.encode() for raw in TOY])
    bound = WordBound(vocab, 6)
    bound.advance(TOY.index("abcd"))
    assert bound.run == 4
    bound.advance(TOY.index("ab"))
    with pytest.raises(GrammarViolationError, match="longer than 6 characters"):
        bound.advance(TOY.index("a"))
    bound.advance(TOY.index(" a"))
    assert bound.run == 1


def test_a_sentence_past_its_words_or_an_edge_past_a_term_is_refused_when_advanced() -> None:
    vocab = Vocabulary([raw.encode() for raw in TOY])
    bound = WordBound(vocab, 32, max_words=2, terms=("str.join",))
    for token in ("ab", " a"):
        bound.advance(TOY.index(token))
    assert bound.words == 2
    with pytest.raises(GrammarViolationError, match="longer than 2 words"):
        bound.advance(TOY.index(" ab"))
    for token in (" [1", "]. A", " ", "str", ".join"):  # a new sentence: its count starts again
        bound.advance(TOY.index(token))
    assert bound.words == 2
    bound.advance(TOY.index("abcdefgh"))  # 8 characters after the term: its edge is full
    with pytest.raises(GrammarViolationError, match="more than 8 characters after a dotted"):
        bound.advance(TOY.index("a"))


def test_steering_bounds_words_only_where_its_matcher_does_not() -> None:
    vocab = Vocabulary([raw.encode() for raw in TOY])
    compiler = xgr.GrammarCompiler(xgr.TokenizerInfo(TOY, stop_token_ids=[0]))

    def steered(request: Any) -> Any:
        matcher = xgr.GrammarMatcher(compiler.compile_grammar(local_grammar(request)))
        return steering_for(request, vocab, [0], matcher=matcher)

    request = build_request(QUESTION, SOURCES)
    assert "{1,32}" in request.grammar_text(spell_quotes=False)  # what a server is sent
    assert "[^ \\t\\n\\r\\[\\].!?]+" in local_grammar(request)
    assert steered(request).word_bound is not None
    assert steering_for(request, vocab, [0], matcher=None).word_bound is None
    # No word rule in AUTO; a term whose first part is 18 characters long keeps the bound in
    # the grammar (a word on its way to it may pass 24 characters before its dot).
    for other in (
        build_request(QUESTION, SOURCES, policy="auto"),
        build_request(QUESTION, [*SOURCES, LONG_TERM], max_word_chars=24),
    ):
        assert not bounds_words(other)
        assert local_grammar(other) == other.grammar_text(spell_quotes=False)
        assert steered(other).word_bound is None
    assert bounds_words(build_request(QUESTION, [*SOURCES, LONG_TERM], max_word_chars=26))


@pytest.mark.integration
@pytest.mark.parametrize("family", ["smollm2", *sorted(FAMILIES)])
def test_real_tokenizer_masks_equal_the_bounded_grammar(
    family: str, request: pytest.FixtureRequest
) -> None:
    if family == "smollm2":
        info = request.getfixturevalue("default_generator").tokenizer_info
    else:
        info = xgr.TokenizerInfo.from_huggingface(family_tokenizer(family))
    assert walks(info, 14, 3, 60) + walks(info, 14, 2, 40, max_sentence_words=4) > 300
