"""What every lever is: one steering effect on one answer's logits, asked of ``StepEdits``.

``Lever`` is the interface (``citeformer.decoding.levers`` tells what a lever may read and
change); ``Removing`` the levers that only remove tokens, which a batch steers all rows of in
one call; ``CachedSupport`` the claim scores the levers of one request share.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from citeformer.decoding.answer_state import AnswerState
from citeformer.decoding.edits import StepEdits, Wanted
from citeformer.evidence.scoring import Support

__all__ = ["CachedSupport", "Lever", "Removing"]


class CachedSupport(Support):
    """A ``Support`` that scores each claim once.

    The levers of a row ask for the same claim at many steps (``ClauseEnd``, ``EndIntent``,
    ``EvidenceBias``), and with ``EmbeddingEvidence`` a score is a model's forward pass.
    """

    def __init__(self, support: Support, size: int = 256) -> None:
        self._support = support
        self._size = size
        self._scores: dict[str, list[float]] = {}

    def scores(self, claim: str) -> list[float]:  # noqa: D102
        found = self._scores.get(claim)
        if found is None:
            if len(self._scores) >= self._size:  # a row's recent claims: bounded
                self._scores.clear()
            found = self._scores[claim] = self._support.scores(claim)
        return found


class Lever:
    """One steering effect on one answer's logits."""

    needs_raw = False
    """Whether ``edit`` reads ``edits.wanted()``, drawn from the model's scores before any mask.

    Read only where the grammar's mask allows a marker opener (``Wanted.may_open``): elsewhere
    ``wanted()`` is ``None``, as for a row not read."""

    def shares(self, state: AnswerState) -> bool:
        """Whether ``edit`` may read ``Wanted.chain_share`` at this step.

        The share costs a reduction over the row's vocabulary: a steering reads it only for the
        rows whose levers ask.
        """
        return False

    def may_share(self, state: AnswerState) -> bool:
        """``shares``'s cheap part (the text's), asked first: ``False`` where ``shares`` is."""
        return self.shares(state)

    def edit(self, state: AnswerState, edits: StepEdits) -> None:
        """Ask ``edits`` for this step's changes to the row of the answer ``state`` holds."""
        raise NotImplementedError

    batched = False
    """Whether the class steers many rows in one call (``edit_rows``), never raising for one."""

    @classmethod
    def edit_rows(
        cls, levers: Sequence[Lever], states: Sequence[AnswerState], rows: Sequence[int],
        edits: StepEdits,
    ) -> None:
        """``edit`` for many rows at once: the same edits, asked in fewer entries.

        ``levers[k]``, of the answer ``states[k]``, steers the logits row ``rows[k]``.
        """
        for lever, state, row in zip(levers, states, rows, strict=True):
            edits.row = row
            lever.edit(state, edits)

    def apply(
        self, state: AnswerState, logits: torch.Tensor, raw: torch.Tensor | None = None
    ) -> None:
        """Steer one row of logits (``[1, vocab]``, in place) alone; ``raw``: its unmasked scores.

        What a batch does for every row at once, for one row: for a test, or an engine that
        steers a row at a time.
        """
        edits = StepEdits(self._wanted(raw, logits) if raw is not None else None)
        self.edit(state, edits)
        edits.apply(logits)

    def _wanted(self, raw: torch.Tensor, logits: torch.Tensor) -> dict[int, Wanted] | None:
        return None


class Removing(Lever):
    """A lever that only removes tokens, from arrays its vocabulary shares.

    It steers every row of a batch in one call (``batched``), one removal entry per array the
    rows share.
    """

    batched = True

    def removals(self, state: AnswerState) -> tuple[np.ndarray, ...]:
        """The ids to remove from the row of the answer ``state`` holds, in the order removed."""
        raise NotImplementedError

    def edit(self, state: AnswerState, edits: StepEdits) -> None:  # noqa: D102
        for ids in self.removals(state):
            edits.remove(ids)

    @classmethod
    def edit_rows(  # noqa: D102
        cls, levers: Sequence[Lever], states: Sequence[AnswerState], rows: Sequence[int],
        edits: StepEdits,
    ) -> None:
        # Each row's k-th removal in round k, so each row's removals keep their order.
        rounds: list[dict[int, tuple[np.ndarray, list[int]]]] = []
        for lever, state, row in zip(levers, states, rows, strict=True):
            for k, ids in enumerate(lever.removals(state)):  # type: ignore[attr-defined]
                if k == len(rounds):
                    rounds.append({})
                rounds[k].setdefault(id(ids), (ids, []))[1].append(row)
        for shared in rounds:
            for ids, together in shared.values():
                edits.remove_rows(together, ids)
