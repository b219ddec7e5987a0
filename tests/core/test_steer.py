"""The readability processors on a scripted vocabulary: which logits move, and by how much."""

from __future__ import annotations

import math

import pytest
import torch

from citeformer import InvalidInputError, Source
from citeformer.evidence import Support
from citeformer.readability import OFF, Readability
from citeformer.steer import (
    CiteAfterWordProcessor,
    EndBiasProcessor,
    EndIntentProcessor,
    NumberCopyProcessor,
    RawScores,
    RepeatBlockProcessor,
    TokenClasses,
    readability_processors,
)
from citeformer.types import Policy

VOCAB = [
    b"<eos>", b"Paris", b" is", b" [", b"[", b"1", b"]", b".", b".\n", b",", b" in", b"8",
    b"9", b" 18", b"7", b"!", b" the", b" ",
]
TOKEN = {raw.decode(): index for index, raw in enumerate(VOCAB)}
TOKENS = TokenClasses(VOCAB)
NEG = float("-inf")


def ids(*texts: str) -> torch.LongTensor:
    return torch.tensor([[TOKEN["Paris"], *(TOKEN[t] for t in texts)]])


def logits(**values: float) -> torch.FloatTensor:
    scores = torch.zeros(1, len(VOCAB))
    for text, value in values.items():
        scores[0, TOKEN[text.replace("_", " ")]] = value
    return scores


def test_token_classes() -> None:
    assert sorted(TOKENS.enders.tolist()) == [TOKEN["."], TOKEN[".\n"], TOKEN["!"]]
    assert sorted(TOKENS.openers.tolist()) == [TOKEN[" ["], TOKEN["["]]
    assert TOKEN[" 18"] in TOKENS.digit_ids.tolist()
    assert TOKEN["1"] in TOKENS.exempt and TOKEN["<eos>"] not in TOKENS.exempt


def step(processor: object, sequence: torch.LongTensor, scores: torch.FloatTensor) -> list[float]:
    return processor(sequence, scores)[0].tolist()  # type: ignore[operator, no-any-return]


def feed(processor: object, answer: tuple[str, ...], scores: torch.FloatTensor) -> list[float]:
    """Call as generate() does: once on the prompt, then once per answer token; the last output."""
    sequence = ids(*answer)
    out: list[float] = []
    for end in range(1, sequence.shape[1] + 1):
        out = step(processor, sequence[:, :end], scores.clone())
    return out


def test_a_wanted_sentence_end_becomes_a_marker_where_ending_is_masked() -> None:
    raw = RawScores()
    processor = EndIntentProcessor(raw, TOKENS)
    model = logits(**{".": 5.0, ",": 4.0, "_[": 1.0})
    raw(ids(), model.clone())
    masked = model.clone()
    masked[0, TOKENS.enders] = NEG  # the grammar: no terminator before a cite-group
    out = step(processor, ids(), masked)
    assert max(range(len(out)), key=out.__getitem__) == TOKEN[" ["]
    # After the mask, the openers carry their own probability plus what ending had.
    probs = torch.softmax(model[0], dim=-1)
    wanted = probs[TOKENS.enders].sum() + probs[TOKENS.openers].sum()
    shown = torch.softmax(torch.tensor(out), dim=-1)[TOKENS.openers].sum()
    assert math.isclose(shown.item(), wanted.item(), rel_tol=1e-4)


def test_nothing_moves_where_ending_is_allowed_without_support() -> None:
    raw = RawScores()
    processor = EndIntentProcessor(raw, TOKENS)
    model = logits(**{".": 5.0, "_[": 1.0})
    raw(ids(), model.clone())
    assert step(processor, ids(), model.clone()) == model[0].tolist()


def test_nothing_moves_where_no_marker_may_open() -> None:
    raw = RawScores()
    processor = EndIntentProcessor(raw, TOKENS)
    model = logits(**{".": 5.0})
    raw(ids(), model.clone())
    masked = model.clone()
    masked[0, TOKENS.enders] = NEG
    masked[0, TOKENS.openers] = NEG
    assert step(processor, ids(), masked.clone()) == masked[0].tolist()


class FixedSupport(Support):
    def __init__(self, score: float) -> None:
        self.score = score
        self.claims: list[str] = []

    def scores(self, claim: str) -> list[float]:
        self.claims.append(claim)
        return [self.score, 0.0]


@pytest.mark.parametrize(("support", "moves"), [(0.9, True), (0.3, False)])
def test_auto_cites_a_well_supported_sentence(support: float, moves: bool) -> None:
    raw = RawScores()
    scorer = FixedSupport(support)
    processor = EndIntentProcessor(raw, TOKENS, support=scorer, threshold=0.5)
    model = logits(**{".": 5.0, "_[": 1.0})
    raw(ids(), model.clone())
    out = feed(processor, (" is", " the", " is", " the"), model)
    assert (out[TOKEN[" ["]] > 1.0) is moves
    assert scorer.claims and scorer.claims[-1] == "is the is the"


def test_repeat_block_blocks_an_answer_ngram_only() -> None:
    processor = RepeatBlockProcessor(3, TOKENS.exempt)
    out = feed(processor, (" is", " the", " in", " is", " the"), logits())
    assert out[TOKEN[" in"]] == NEG  # " is the" was followed by " in" before
    assert sum(v == NEG for v in out) == 1


def test_repeat_block_spares_markers_and_keeps_one_token() -> None:
    processor = RepeatBlockProcessor(2, TOKENS.exempt)
    out = feed(processor, (" [", "1", " ["), logits())
    assert out[TOKEN["1"]] == 0.0
    only = RepeatBlockProcessor(2, TOKENS.exempt)
    scores = torch.full((1, len(VOCAB)), NEG)
    scores[0, TOKEN[" the"]] = 1.0
    out = feed(only, (" is", " the", " is"), scores)
    assert out[TOKEN[" the"]] == 1.0  # the only token left is kept


@pytest.mark.parametrize(
    ("answer", "blocked"),
    [((" is", ","), True), ((" is", ",", " "), True), ((" is",), False), ((" the",), False)],
)
def test_no_marker_right_after_a_comma(answer: tuple[str, ...], blocked: bool) -> None:
    out = feed(CiteAfterWordProcessor(TOKENS), answer, logits())
    assert (out[TOKEN[" ["]] == NEG) is blocked
    assert (out[TOKEN["["]] == NEG) is blocked


def test_no_marker_after_a_comma_unless_nothing_else_is_left() -> None:
    scores = torch.full((1, len(VOCAB)), NEG)
    scores[0, TOKEN[" ["]] = 1.0  # the sentence bound: the grammar allows only a marker
    out = feed(CiteAfterWordProcessor(TOKENS), (" is", ","), scores)
    assert out[TOKEN[" ["]] == 1.0


def test_number_copy_penalises_invented_digits() -> None:
    processor = NumberCopyProcessor(TOKENS, ["It was completed in 1889."], 8.0)
    out = feed(processor, (" in", " 18", "8"), logits())
    assert out[TOKEN["9"]] == 0.0  # 1889
    assert out[TOKEN["7"]] == -8.0  # 1887 is in no source
    assert out[TOKEN["8"]] == -8.0  # 1888 neither


def test_number_copy_leaves_marker_digits_alone() -> None:
    processor = NumberCopyProcessor(TOKENS, ["No numbers here."], 8.0)
    out = feed(processor, (" [",), logits())
    assert out[TOKEN["1"]] == 0.0


def test_end_bias_grows_with_cited_sentences() -> None:
    processor = EndBiasProcessor(VOCAB, [TOKEN["<eos>"]], 2.0)
    out = feed(processor, (" is", " [", "1", "]", "."), logits())
    assert out[TOKEN["<eos>"]] == 2.0
    mid = EndBiasProcessor(VOCAB, [TOKEN["<eos>"]], 2.0)
    out = feed(mid, (" is", " [", "1"), logits())
    assert out[TOKEN["<eos>"]] == 0.0


def test_processors_of_a_call() -> None:
    class Info:
        decoded_vocab = VOCAB

    sources = [Source("It was completed in 1889.")]
    before, after = readability_processors(
        Readability(end_bias=1.0), Policy.REQUIRED, "When?", sources, Info(), None, [0]
    )
    assert [type(p) for p in before] == [RawScores]
    assert [type(p).__name__ for p in after] == [
        "EndIntentProcessor", "CiteAfterWordProcessor", "NumberCopyProcessor",
        "RepeatBlockProcessor", "EndBiasProcessor",
    ]
    assert readability_processors(OFF, Policy.AUTO, "When?", sources, Info(), None) == ([], [])


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"no_repeat_ngram": 1}, "no_repeat_ngram must be 0"),
        ({"number_penalty": -1.0}, "number_penalty must be a finite number >= 0"),
        ({"end_bias": float("nan")}, "end_bias must be a finite number"),
        ({"auto_cite_support": 2.0}, "auto_cite_support must be between 0 and 1"),
        ({"end_intent": 1}, "end_intent must be True or False"),
        ({"cite_after_punctuation": "no"}, "cite_after_punctuation must be True or False"),
    ],
)
def test_bad_settings_are_named(options: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        Readability(**options)  # type: ignore[arg-type]
