"""The evidence lever: which logits get which bias, on a scripted vocabulary and scores."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest
import torch

from citeformer.decoding.levers import AnswerState, EvidenceBias
from citeformer.decoding.vocab import Vocabulary
from citeformer.evidence import Support

VOCAB = [
    b"<eos>", b"Paris", b" is", b" [", b"[", b"1", b"2", b"3", b"]", b"].", b"][",
    b"12", b"1]", b"0", b" in", b" France", b".", b" ", b"1889",
]
TOKEN = {raw.decode(): index for index, raw in enumerate(VOCAB)}


class Fixed(Support):
    """Scores given by the test; records the claims it was asked about."""

    def __init__(self, scores: Sequence[float]) -> None:
        self._scores = list(scores)
        self.claims: list[str] = []

    def scores(self, claim: str) -> list[float]:
        self.claims.append(claim)
        return list(self._scores)


def run(generated: Sequence[str], scores: Sequence[float], weight: float = 2.0,
        logits: torch.Tensor | None = None) -> tuple[torch.Tensor, Fixed]:
    """The lever's output at the step after ``generated`` (token texts) was written; it acts at
    every step before, as in a generation."""
    support = Fixed(scores)
    lever = EvidenceBias(support, weight, len(scores), Vocabulary(VOCAB))
    state = AnswerState(VOCAB)
    out = torch.zeros(1, len(VOCAB))
    for text in generated:
        state.append(TOKEN[text])
        out = torch.zeros(1, len(VOCAB)) if logits is None else logits.clone()
        lever.apply(state, out, None)
    return out[0], support


def bias(out: torch.Tensor, token: str) -> float:
    return float(out[TOKEN[token]])


def test_no_change_away_from_a_marker() -> None:
    out, support = run(["Paris", " is", " in", " France"], [0.1, 0.9, 0.2])
    assert torch.equal(out, torch.zeros(len(VOCAB)))
    assert support.claims == []
    out, _ = run(["Paris", " [", "2", "]."], [0.1, 0.9, 0.2])
    assert torch.equal(out, torch.zeros(len(VOCAB)))


def test_open_marker_biases_each_id_token_by_its_source() -> None:
    out, support = run(["Paris", " is", " in", " France", " ["], [0.1, 0.9, 0.3])
    assert support.claims == ["Paris is in France"]
    # weight * (score - lowest score)
    assert bias(out, "1") == pytest.approx(0.0)
    assert bias(out, "2") == pytest.approx(2 * 0.8)
    assert bias(out, "3") == pytest.approx(2 * 0.2)
    for other in ("Paris", " [", "]", "].", "0", " France"):
        assert bias(out, other) == 0.0


def test_multi_digit_ids_take_the_best_id_a_token_can_begin() -> None:
    scores = [0.0] * 12
    scores[0], scores[9], scores[11] = 0.3, 0.5, 0.9  # ids 1, 10, 12
    out, _ = run(["Paris", " ["], scores)
    assert bias(out, "1") == pytest.approx(2 * 0.9)  # "1" begins 1, 10, 11, 12
    assert bias(out, "12") == pytest.approx(2 * 0.9)
    assert bias(out, "1]") == pytest.approx(2 * 0.3)  # ends the id: exactly [1]
    assert bias(out, "2") == 0.0
    out, _ = run(["Paris", " [", "1"], scores)
    assert bias(out, "2") == pytest.approx(2 * 0.9)  # [12
    assert bias(out, "0") == pytest.approx(2 * 0.5)  # [10
    assert bias(out, "]") == pytest.approx(2 * 0.3)  # [1]
    assert bias(out, "].") == pytest.approx(2 * 0.3)
    assert bias(out, "3") == 0.0  # [13 is no id


def test_ids_beyond_the_sources_get_nothing() -> None:
    out, _ = run(["Paris", " ["], [0.0, 1.0])
    assert bias(out, "3") == 0.0
    assert bias(out, "2") == pytest.approx(2.0)


def test_masked_tokens_stay_masked() -> None:
    logits = torch.zeros(1, len(VOCAB))
    logits[0, TOKEN["2"]] = -math.inf  # the grammar forbids [2 here
    out, _ = run(["Paris", " ["], [0.1, 0.9, 0.3], logits=logits)
    assert bias(out, "2") == -math.inf
    assert bias(out, "3") == pytest.approx(2 * 0.2)


def test_second_marker_of_a_group_reuses_the_claim() -> None:
    out, support = run(["Paris", " [", "1", "][",], [0.1, 0.9, 0.3])
    assert support.claims == ["Paris"]
    assert bias(out, "2") == pytest.approx(1.6)


def test_equal_scores_leave_logits_alone() -> None:
    out, _ = run(["Paris", " ["], [0.4, 0.4, 0.4])
    assert torch.equal(out, torch.zeros(len(VOCAB)))


def test_opening_a_second_marker_is_worth_no_more_than_the_best_higher_id() -> None:
    # After [2: "]" ends the group on source 2; "][" also opens a marker that can only name 3.
    out, _ = run(["Paris", " [", "2"], [0.1, 0.9, 0.3])
    assert bias(out, "]") == pytest.approx(2 * 0.8)
    assert bias(out, "].") == pytest.approx(2 * 0.8)
    assert bias(out, "][") == pytest.approx(2 * 0.2)
    # A second source as good as the first is not held back.
    out, _ = run(["Paris", " [", "1"], [0.9, 0.1, 0.9])
    assert bias(out, "][") == pytest.approx(bias(out, "]"))


def test_after_a_marker_a_weaker_second_marker_is_held_back() -> None:
    out, support = run(["Paris", " [", "2", "]"], [0.1, 0.9, 0.3])
    assert support.claims == ["Paris"]
    assert bias(out, "[") == pytest.approx(-2 * (0.8 - 0.2))
    assert bias(out, " [") == pytest.approx(-2 * (0.8 - 0.2))
    assert bias(out, ".") == 0.0
    out, _ = run(["Paris", " [", "1", "]"], [0.9, 0.1, 0.9])
    assert bias(out, "[") == 0.0
    out, _ = run(["Paris", " [", "3", "]"], [0.1, 0.2, 0.9])  # no id above 3
    assert bias(out, "[") == pytest.approx(-2 * 0.8)

