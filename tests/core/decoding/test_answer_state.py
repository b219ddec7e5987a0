"""The answer's state, kept token by token, against what the whole text says at every step.

Every tracker of ``AnswerState`` and every lever that reads a bounded tail of the answer must
find what a read of the whole text finds (the definitions below), whatever the tokens: cut
characters, brackets, line breaks and white space of every kind, in any order.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from hypothesis import given, settings
from hypothesis import strategies as st

from citeformer.decoding.answer_state import AnswerState, group_start
from citeformer.decoding.edits import StepEdits
from citeformer.decoding.levers import EndBias, WordRepeatBlock, _trailing_number
from citeformer.decoding.vocab import WORD, Vocabulary
from citeformer.evidence.scoring import claim_of
from citeformer.grammar.markers import CLOSED_GROUP, MARKER_LIKE, OPEN_GROUP

PIECES = [
    b"<eos>", b"Paris", b" is", b" the", b"capital", b" [", b"[", b"1", b"2", b"12", b"]",
    b"][", b"].", b"] ", b".", b". ", b"!", b"?", b",", b" ", b"\n", b".\n", b"  ", b" 3",
    b".5", b",000", b"`", b" `str", b".join", b"'", b"-", b"\xc3", b"\xa9", b"\xc3\xa9",
    b"\xc2", b"\xa0", b"\xe2\x80", b"\x83", b"\xff", b"Paris is", b" paris", b" IS", b"(",
    b")", b'"', b"\xd9\xa3", b"x" * 30, b"y" * 23,
]
VOCAB = Vocabulary(PIECES)
STOP = [0]
streams = st.lists(st.integers(min_value=1, max_value=len(PIECES) - 1), max_size=60)


def states(tokens: list[int]) -> Iterator[AnswerState]:
    """The state after each token (one object, read at every step)."""
    state = AnswerState(VOCAB.token_bytes)
    for token in tokens:
        state.append(token)
        yield state


@settings(max_examples=300, deadline=None)
@given(streams)
def test_every_tracker_says_what_the_whole_text_says(tokens: list[int]) -> None:
    for state in states(tokens):
        text = state.data.decode("utf-8", errors="replace")
        assert state.text == text
        assert state.claim == claim_of(text)
        assert state.claim_words == len(WORD.findall(claim_of(text)))
        assert state.last_open == text.rfind("[") and state.last_close == text.rfind("]")
        assert text[state.sentence_start:] == re.split(r"\][.!?]", text)[-1]
        assert state.lstripped() == text.lstrip()
        assert state.last_solid() == text.rstrip()[-1:]
        for end in range(len(text) + 1):
            assert state.claim_before(end) == claim_of(text[:end])
        opened = text.rfind("[")
        if opened >= 0:
            start = group_start(text, opened)
            for group in (OPEN_GROUP, CLOSED_GROUP):
                whole = group.search(text)
                found = group.search(text, start)
                assert (whole and whole.span()) == (found and found.span())


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="0123456789.,x \n\u0663", max_size=30))
def test_the_trailing_number_is_read_from_the_end(text: str) -> None:
    match = re.search(r"\d+(?:[.,]\d+)*[.,]?$", text)
    assert _trailing_number(text) == (match.group(0) if match else "")


def _ended(text: str, every_sentence: bool) -> float | None:
    """``EndBias``'s count read from the whole text: its definition."""
    end = r"[.!?]" if every_sentence else r"\]\s*[.!?]"
    text = text.rstrip()
    if not re.search(end + "$", text):
        return None
    return float(len(re.findall(end + r"(?:\s|$)", text)))


@settings(max_examples=300, deadline=None)
@given(streams, st.booleans())
def test_end_bias_counts_the_sentences_the_whole_text_holds(
    tokens: list[int], every_sentence: bool
) -> None:
    lever = EndBias(STOP, 1.0, every_sentence=every_sentence)
    for state in states(tokens):
        edits = StepEdits()
        lever.edit(state, edits)
        added = [value for *_, value in edits._additions]
        expected = _ended(state.text, every_sentence)
        assert added == ([] if expected is None else [expected])


def _blocked(text: str, n: int, lever: WordRepeatBlock) -> set[int]:
    """What ``WordRepeatBlock`` removes, read from the whole text: its definition."""
    text = MARKER_LIKE.sub(" ", text)
    words = [w.lower() for w in WORD.findall(text)]

    def said(words: list[str]) -> set[str]:
        context = words[len(words) - (n - 1):]
        if len(context) < n - 1:
            return set()
        return {
            words[i + n - 1] for i in range(len(words) - n + 1) if words[i:i + n - 1] == context
        }

    blocked: set[int] = set()
    if text and WORD.fullmatch(text[-1]):
        *before, partial = words
        for word in said(before):
            if word == partial:
                blocked |= lever._closers
            elif word.startswith(partial):
                blocked |= lever._writing(word[len(partial):], glued=True)
        for word in said(words):
            blocked |= lever._writing(word, glued=False)
    else:
        for word in said(words):
            blocked |= lever._writing(word, glued=None)
    return blocked


# Words, white space and brackets: markers that close over words already written.
WORDY = [PIECES.index(p) for p in (
    b"Paris", b" is", b" the", b" paris", b" IS", b" [", b"[", b"]", b" ", b"\n", b"1", b".",
    b"x" * 30, b"y" * 23, b"\xc3", b"\xa9",
)]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(WORDY), max_size=60), st.integers(min_value=2, max_value=4))
def test_word_repeats_are_found_as_in_the_whole_text(tokens: list[int], n: int) -> None:
    lever = WordRepeatBlock(n, VOCAB, STOP)
    for state in states(tokens):
        edits = StepEdits()
        lever.edit(state, edits)
        removed = {int(i) for *_, ids in edits._removals for i in ids}
        assert removed == _blocked(state.text, n, lever)
