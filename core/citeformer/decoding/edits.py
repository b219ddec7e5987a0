"""One step's lever changes over a whole batch, applied in a few tensor operations.

A lever never touches the logits itself: for the row being steered it asks ``StepEdits`` to
remove tokens (``remove``, keeping at least one) or to add finite values to some (``add``), and
reads what the model wanted before the masks (``wanted``). Once every row's levers have spoken,
``apply`` makes all the removals in one indexed write and all the additions in one accumulating
write, ordered by round (each row's first addition, then its second, ...), so each logit receives
its additions in the order its row's levers made them and the floats come out as if each lever
had written its own. Index arrays are built on the host and sent to the logits' device once per
write; the logits never leave it. Logits already on the host, in a float type numpy computes
alike, are read and written through a numpy view of their memory, which costs a fraction of
torch's indexed operations on a few entries; there a step's few edits (batch 1's) are made one
write each, in the same order, which takes fewer operations than building the batched writes.

``Wanted`` is the model's own choice between ending a sentence and opening a marker, from the
scores before any mask and what the masks allow, read for every row that asks at once
(``WantedReader``, in ``citeformer.decoding.wanted``).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from operator import itemgetter

import numpy as np
import torch

from citeformer.decoding.wanted import (
    CHAIN_SHARE,
    HOST_FLOATS,
    Wanted,
    WantedReader,
    host_view,
)
from citeformer.errors import GrammarViolationError

__all__ = ["CHAIN_SHARE", "HOST_FLOATS", "StepEdits", "Wanted", "WantedReader", "host_view"]


_NEG = float("-inf")
_FLOAT32_MAX = float(np.finfo(np.float32).max)
_FEW_EDITS = 8
"""Up to this many edits a step on host logits are written one by one (``_apply_each``)."""

Ids = torch.Tensor | np.ndarray | Sequence[int]
"""Token ids: a CPU tensor, an array or a list."""


class StepEdits:
    """The removals and additions the levers ask for at one step, for every row of a batch.

    ``row`` is the logits row now being steered; set it before calling that row's levers (a
    lever that steers many rows at once names them: ``remove_rows``), and ``position`` the
    asking lever's place among its row's levers: each row's edits are made in the order of its
    levers, whatever the order they were asked in (``take``). ``wanted``: per row, what
    the model wanted (rows whose levers read the model's scores). ``allowed``: per row, how many
    tokens the masks left, where known; a row whose removals take fewer of its finite tokens
    cannot be emptied by them and is not read again.
    """

    def __init__(
        self, wanted: dict[int, Wanted] | None = None, allowed: dict[int, int] | None = None
    ) -> None:
        self.row = 0
        self.position = 0
        self._wanted = wanted or {}
        self._allowed = allowed or {}
        # In the order asked: (position, row, ids) for one row, (position, rows, ids) for the
        # same ids in many.
        self._removals: list[tuple[int, int | np.ndarray, np.ndarray]] = []
        # (position, row, ids, value)
        self._additions: list[tuple[int, int, np.ndarray, np.ndarray | float]] = []
        self._forgotten: set[int] = set()

    def remove(self, ids: Ids) -> None:
        """Remove ``ids`` from this row (-inf), unless that would leave no token at all."""
        found = _as_ids(ids)
        if found.shape[0]:
            self._removals.append((self.position, self.row, found))

    def remove_rows(self, rows: Sequence[int], ids: Ids) -> None:
        """``remove`` ``ids`` from each of ``rows``: one entry however many rows."""
        found = _as_ids(ids)
        if found.shape[0] and rows:
            self._removals.append((self.position, np.asarray(rows, dtype=np.int64), found))

    def add(self, ids: Ids, value: torch.Tensor | np.ndarray | float) -> None:
        """Add ``value`` (one float, or one per id) to the logits of ``ids`` in this row.

        ``ids`` must not repeat an id; a removed token stays removed. A value that is not a
        finite float32 raises ``GrammarViolationError`` (the row's edits are forgotten where
        the steering is told of errors): an infinite addition would turn a removed token's -inf
        into NaN, which a sampler may pick.
        """
        found = _as_ids(ids)
        if found.shape[0]:
            if isinstance(value, torch.Tensor | np.ndarray):
                amount: np.ndarray | float = (
                    value.to(torch.float32).numpy() if isinstance(value, torch.Tensor)
                    else value.astype(np.float32, copy=False)
                )
                finite = bool(np.isfinite(amount).all())
            else:
                amount = value
                finite = math.isfinite(value) and abs(value) <= _FLOAT32_MAX
            if not finite:
                raise GrammarViolationError(
                    f"a lever asked to add a value that is not a finite float32 to row "
                    f"{self.row} ({_shown(value)}); its logits are left as the masks made them"
                )
            self._additions.append((self.position, self.row, found, amount))

    def wanted(self) -> Wanted | None:
        """What the model wanted at this row, or ``None`` where its scores were not read."""
        return self._wanted.get(self.row)

    def mark(self) -> tuple[int, int]:
        """A point to ``rollback`` to: the edits asked so far."""
        return len(self._removals), len(self._additions)

    def rollback(self, mark: tuple[int, int]) -> None:
        """Forget the edits asked after ``mark``."""
        removals, additions = mark
        del self._removals[removals:]
        del self._additions[additions:]

    def take(self, other: StepEdits) -> None:
        """Add the edits ``other`` was asked for (for the same logits), and what it forgot."""
        self._removals += other._removals
        self._additions += other._additions
        self._forgotten |= other._forgotten

    def removals_of(self, rows: Collection[int]) -> dict[int, np.ndarray]:
        """The ids each of ``rows`` was asked to lose in entries of its own (``remove``).

        Rows whose edits are forgotten are left out. With ``drop_removals``, for a caller that
        makes those removals in a write of its own (``MaskPlan.forbid``).
        """
        found: dict[int, list[np.ndarray]] = {}
        for _, row, ids in self._removals:
            if isinstance(row, int) and row in rows and row not in self._forgotten:
                found.setdefault(row, []).append(ids)
        return {row: np.concatenate(ids) for row, ids in found.items()}

    def drop_removals(self, rows: Collection[int]) -> None:
        """Forget the removals asked for ``rows`` in entries of their own (``removals_of``)."""
        self._removals = [
            (position, row, ids) for position, row, ids in self._removals
            if not (isinstance(row, int) and row in rows)
        ]

    def forget(self, row: int) -> None:
        """Make none of ``row``'s edits, those asked so far or later (a lever of it failed)."""
        self._forgotten.add(row)

    def apply(self, logits: torch.Tensor, *, host: np.ndarray | None = None) -> None:
        """Make every edit asked for in ``logits`` (``[rows, vocab]``, in place).

        ``host``: their memory as an array (``host_view``), where the caller has it already.
        """
        if self._forgotten:
            self._drop_forgotten()
        # Each row's edits in the order of its levers (a stable sort: asked order among equals).
        self._removals.sort(key=itemgetter(0))
        self._additions.sort(key=itemgetter(0))
        host = host if host is not None else host_view(logits)
        few = len(self._removals) + len(self._additions) <= _FEW_EDITS
        if host is not None and few and self._apply_each(host):
            return
        if self._removals:
            self._apply_removals(logits, host)
        if self._additions:
            self._apply_additions(logits, host)

    def _apply_each(self, host: np.ndarray) -> bool:
        """Make the few edits one write each, in order, where no removal may empty its row.

        What the batched writes give, in fewer operations: right after a model's forward pass on
        the same CPU each operation runs on cold caches, and building the batched index arrays
        costs more than the writes. Each addition's ids are distinct (``add``), so ``+=`` adds
        each value once, in the levers' order. False, and nothing written, where a row's removals
        may take every token the masks left it (the batched path keeps one).
        """
        removed: dict[int, int] = {}
        for _, rows, ids in self._removals:
            for row in ([rows] if isinstance(rows, int) else rows.tolist()):
                removed[row] = removed.get(row, 0) + ids.shape[0]
        allowed = self._allowed
        if any(allowed.get(row, 0) <= count for row, count in removed.items()):
            return False
        for _, rows, ids in self._removals:
            if isinstance(rows, int):
                host[rows][ids] = _NEG  # a row's view indexed by one array: the cheapest write
            else:
                host[rows[:, None], ids] = _NEG
        for _, row, ids, value in self._additions:
            # float32 first, as the batched write: the same sums in a float64 row.
            host[row][ids] += value if isinstance(value, np.ndarray) else np.float32(value)
        return True

    def _drop_forgotten(self) -> None:
        forgotten = self._forgotten
        removals: list[tuple[int, int | np.ndarray, np.ndarray]] = []
        for position, rows, ids in self._removals:
            if isinstance(rows, int):
                if rows not in forgotten:
                    removals.append((position, rows, ids))
            else:
                rows = np.array([row for row in rows.tolist() if row not in forgotten], np.int64)
                if rows.shape[0]:
                    removals.append((position, rows, ids))
        self._removals = removals
        self._additions = [entry for entry in self._additions if entry[1] not in forgotten]

    def _apply_additions(self, logits: torch.Tensor, host: np.ndarray | None) -> None:
        # One accumulating write, in the order of each row's levers: a logit two levers raise
        # gets them in the order the levers act (on a CPU the write adds its duplicates in
        # order), so the floats are those of one write per lever.
        additions = self._additions
        lengths = np.array([ids.shape[0] for _, _, ids, _ in additions])
        r = np.repeat(np.array([row for _, row, _, _ in additions]), lengths)
        c = np.concatenate([ids for _, _, ids, _ in additions])
        values = [value for *_, value in additions]
        if not any(isinstance(value, np.ndarray) for value in values):
            v = np.repeat(np.array(values, dtype=np.float32), lengths)
        else:
            v = np.concatenate([
                value if isinstance(value, np.ndarray) else np.full(length, value, np.float32)
                for value, length in zip(values, lengths.tolist(), strict=True)
            ])
        if host is not None:  # numpy adds a repeated index's values in order, as torch does
            np.add.at(host, (r, c), v.astype(host.dtype, copy=False))
            return
        logits.index_put_(
            _indices(logits, r, c), _to(logits, v).to(logits.dtype), accumulate=True
        )

    def _apply_removals(self, logits: torch.Tensor, host: np.ndarray | None) -> None:
        r, c = self._removal_indices()
        # A row whose removals number fewer than the tokens the masks left keeps one of them.
        removed = np.bincount(r, minlength=logits.shape[0])
        allowed = np.full(logits.shape[0], -1)
        if self._allowed:
            allowed[list(self._allowed)] = list(self._allowed.values())
        doubtful = np.flatnonzero((removed > 0) & ((allowed < 0) | (removed >= allowed)))
        if host is not None:
            kept = host[r, c] if doubtful.shape[0] else None
            host[r, c] = _NEG
            if kept is not None:
                emptied = _emptied(host, doubtful, allowed, r, c, np.isfinite(kept))
                if emptied:
                    self._remove_in_turn(host, emptied, r, c, kept)
            return
        if not doubtful.shape[0]:
            logits[_indices(logits, r, c)] = _NEG
            return
        rows, ids = _indices(logits, r, c)
        kept_logits = logits[rows, ids]
        logits[rows, ids] = _NEG
        emptied = _emptied(
            logits, doubtful, allowed, r, c, torch.isfinite(kept_logits).cpu().numpy()
        )
        if emptied:
            self._remove_in_turn(logits, emptied, r, c, kept_logits.cpu().double().numpy())

    def _removal_indices(self) -> tuple[np.ndarray, np.ndarray]:
        """The (row, id) pairs of every removal, as two index arrays (pairs may repeat)."""
        one = [(row, ids) for _, row, ids in self._removals if isinstance(row, int)]
        rows = [np.repeat(np.array([row for row, _ in one], dtype=np.int64),
                          [ids.shape[0] for _, ids in one])]
        ids = [ids for _, ids in one]
        for _, many, shared in self._removals:
            if not isinstance(many, int):
                rows.append(np.repeat(many, shared.shape[0]))
                ids.append(np.tile(shared, many.shape[0]))
        return np.concatenate(rows), np.concatenate(ids).astype(np.int64, copy=False)

    def _remove_in_turn(
        self,
        logits: torch.Tensor | np.ndarray,
        emptied: set[int],
        r: np.ndarray,
        c: np.ndarray,
        kept: np.ndarray,
    ) -> None:
        """Make the ``emptied`` rows' removals again one by one, each where it leaves a token.

        As levers acting in turn would: the removals (``r``, ``c``, whose logits were ``kept``)
        are undone, then made in the order asked.

        Every finite token of such a row is among its removed ones: what is left after each
        removal is known from those alone.
        """
        undo = _members(np.array(sorted(emptied)), logits.shape[0])[r]
        at, which, before = r[undo], c[undo], kept[undo]
        if isinstance(logits, np.ndarray):
            logits[at, which] = before
        else:
            logits[_indices(logits, at, which)] = _to(logits, before).to(logits.dtype)
        finite = np.isfinite(before)
        left = {row: set(which[(at == row) & finite].tolist()) for row in emptied}
        for _, many, removed in self._removals:
            for row in ([many] if isinstance(many, int) else many.tolist()):
                if row in emptied:
                    rest = left[row].difference(removed.tolist())
                    if rest:
                        left[row] = rest
                        if isinstance(logits, np.ndarray):
                            logits[row, removed] = _NEG
                        else:
                            logits[row, _to(logits, removed)] = _NEG


def _shown(value: torch.Tensor | np.ndarray | float) -> str:
    if isinstance(value, np.ndarray):
        value = torch.from_numpy(value)
    if isinstance(value, torch.Tensor):
        bad = value[~torch.isfinite(value.to(torch.float32))]
        return f"{bad.numel()} of {value.numel()} values, e.g. {bad.flatten()[0].item()!r}"
    return repr(value)


def _emptied(
    logits: torch.Tensor | np.ndarray,
    doubtful: np.ndarray,
    allowed: np.ndarray,
    r: np.ndarray,
    c: np.ndarray,
    finite: np.ndarray,
) -> set[int]:
    """The ``doubtful`` rows the removals (``r``, ``c``) emptied from ``logits`` (or its view).

    ``finite``: whether each removed logit was finite before. Where the masks' count of
    allowed tokens is known, a row is emptied when the distinct finite tokens removed from it
    reach that count (the masks' tokens are finite, as the rows not doubtful are taken to be);
    elsewhere its best logit is read.
    """
    known = doubtful[allowed[doubtful] >= 0]
    emptied: set[int] = set()
    if known.shape[0]:
        picked = finite & _members(known, logits.shape[0])[r]
        pairs = np.unique(r[picked] * logits.shape[1] + c[picked])
        taken = np.bincount(pairs // logits.shape[1], minlength=logits.shape[0])
        emptied.update(known[taken[known] >= allowed[known]].tolist())
    unknown = doubtful[allowed[doubtful] < 0]
    if unknown.shape[0]:  # one read of those rows alone
        if isinstance(logits, np.ndarray):
            best = logits[unknown].max(-1).tolist()
        else:
            best = logits[_to(logits, unknown)].amax(-1).tolist()
        emptied.update(row for row, top in zip(unknown.tolist(), best, strict=True)
                       if top == _NEG)
    return emptied


def _as_ids(ids: Ids) -> np.ndarray:
    if isinstance(ids, torch.Tensor):
        return ids.numpy()
    return np.asarray(ids, dtype=np.int64)


def _members(rows: np.ndarray, size: int) -> np.ndarray:
    """A table of ``size`` booleans, true at ``rows``: ``table[r]`` tells whether r is one."""
    table = np.zeros(size, dtype=bool)
    table[rows] = True
    return table


def _to(logits: torch.Tensor, array: np.ndarray) -> torch.Tensor:
    tensor = torch.from_numpy(array)
    return tensor if logits.device.type == "cpu" else tensor.to(logits.device, non_blocking=True)


def _indices(logits: torch.Tensor, rows: np.ndarray, ids: np.ndarray) -> tuple[torch.Tensor, ...]:
    return _to(logits, rows.astype(np.int64)), _to(logits, ids.astype(np.int64, copy=False))
