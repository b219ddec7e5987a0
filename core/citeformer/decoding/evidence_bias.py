"""The evidence lever: at an open marker, the ids of the sources that support the claim gain.

The scores are the evidence scorer's (``citeformer.evidence``), one per claim.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from citeformer.decoding.answer_state import AnswerState, group_start
from citeformer.decoding.edits import StepEdits
from citeformer.decoding.lever import Lever
from citeformer.decoding.vocab import Vocabulary
from citeformer.errors import InvalidInputError
from citeformer.evidence.scoring import Support
from citeformer.grammar.markers import CLOSED_GROUP, OPEN_GROUP

__all__ = ["EvidenceBias"]


class EvidenceBias(Lever):
    """Adds ``weight * score`` to the logits of id tokens at an open marker.

    The score of an id is how well its source supports the claim being cited (``support``);
    right after ``[k]``, opening another marker is worth no more than the best source still
    allowed after k, so a weaker source is not stacked after a strong one. Last of the levers:
    it only adds finite values.
    """

    def __init__(self, support: Support, weight: float, n_sources: int, vocab: Vocabulary) -> None:
        self._support = support
        self._weight = weight
        self._n = n_sources
        self._vocab = vocab
        self._id_tokens = vocab.id_token_ids.numpy()
        self._spelled: dict[str, list[tuple[str, list[int], list[int], list[int]]]] = {}
        self._claim: str | None = None
        self._best_by_prefix: dict[str, float] = {}
        self._bias_by_prefix: dict[str, tuple[np.ndarray, np.ndarray] | None] = {}

    def edit(self, state: AnswerState, edits: StepEdits) -> None:  # noqa: D102
        opened = state.last_open
        if opened < 0:
            return
        if state.last_close < opened:
            text = state.text
            match = OPEN_GROUP.search(text, group_start(text, opened))
            if match is not None:
                self._score(state.claim_before(match.start()))
                prefix = match.group(1)
                if prefix not in self._bias_by_prefix:
                    self._bias_by_prefix[prefix] = self._bias(prefix)
                bias = self._bias_by_prefix[prefix]
                if bias is not None:
                    edits.add(*bias)
        elif state.data.endswith(b"]") and state.text.count("]", opened) == 1:
            text = state.text
            match = CLOSED_GROUP.search(text, group_start(text, opened))
            if match is not None:
                self._score(state.claim_before(match.start()))
                best = self._best_by_prefix
                penalty = best["=" + match.group(1)] - best.get(">" + match.group(1), 0.0)
                if penalty > 0:
                    edits.add(self._vocab.opener_ids, -(self._weight * penalty))

    def _score(self, claim: str) -> None:
        if claim == self._claim:
            return
        self._claim = claim
        self._best_by_prefix = self._prefix_scores(self._support.scores(claim))
        self._bias_by_prefix = {}

    def _bias(self, prefix: str) -> tuple[np.ndarray, np.ndarray] | None:
        """The id tokens that score after ``prefix`` and what each gains, or ``None`` for none.

        Only tokens whose digits continue ``prefix`` toward an id of a source can score: the
        groups of the digit strings that do, each spelled ``prefix + digits`` (found once per
        prefix). A token that gains nothing is left out: adding 0 leaves its logit as it is.
        """
        best = self._best_by_prefix
        positions: list[int] = []
        scores: list[float] = []
        for spelled, ends, ends_and_opens, open_ended in self._spellings(prefix):
            exact = best.get("=" + spelled) if spelled else None
            stacked = None if exact is None else min(exact, best.get(">" + spelled, 0.0))
            # A token ending the id scores that exact id, if it is one; ``][`` also commits to
            # citing a second, higher id: worth no more than the best of those, so a weaker
            # source is not stacked after a strong one.
            for group, score in (
                (ends, exact),
                (ends_and_opens, stacked),
                (open_ended, best.get(spelled)),
            ):
                if group and score:
                    positions.extend(group)
                    scores.extend([score] * len(group))
        if not positions:
            return None
        gains = torch.tensor(scores, dtype=torch.float32) * self._weight  # each token in 1 group
        return self._id_tokens[positions], gains.numpy()

    def _spellings(self, prefix: str) -> list[tuple[str, list[int], list[int], list[int]]]:
        """Per digit string that continues ``prefix`` toward an id: the id so far, its groups."""
        found = self._spelled.get(prefix)
        if found is None:
            groups = self._vocab.id_groups
            found = self._spelled[prefix] = [
                (prefix + digits, *groups[digits])
                for digits in sorted(_continuations(prefix, self._n)) if digits in groups
            ]
        return found

    def _prefix_scores(self, scores: Sequence[float]) -> dict[str, float]:
        # "12" -> best score of the ids spelled 12...; "=12" -> the score of id 12 itself;
        # ">12" -> the best score of the ids above 12. Scores are shifted so that the lowest is 0:
        # only the differences between sources matter.
        scores = list(scores[: self._n])
        for number, score in enumerate(scores, start=1):
            try:
                finite = math.isfinite(score)
            except (TypeError, OverflowError):
                finite = False
            if not finite:
                raise InvalidInputError(
                    f"the evidence scorer ({type(self._support).__name__}) scored source "
                    f"{number} {score!r:.40}; a score must be a finite number"
                )
        low = min(scores)
        best: dict[str, float] = {}
        above = 0.0
        for number in range(len(scores), 0, -1):
            spelled = str(number)
            shifted = scores[number - 1] - low
            best["=" + spelled] = shifted
            best[">" + spelled] = above
            above = max(above, shifted)
            for end in range(1, len(spelled) + 1):
                key = spelled[:end]
                best[key] = max(best.get(key, 0.0), shifted)
        return best


def _continuations(prefix: str, n: int) -> set[str]:
    """The digit strings that, after ``prefix``, begin or complete an id in 1..n."""
    found: set[str] = set()
    for number in range(1, n + 1):
        spelled = str(number)
        if spelled.startswith(prefix):
            rest = spelled[len(prefix):]
            found.update(rest[:end] for end in range(len(rest) + 1))
    return found
