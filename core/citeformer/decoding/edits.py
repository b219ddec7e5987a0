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
(``WantedReader``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from operator import itemgetter

import numpy as np
import torch

from citeformer.errors import GrammarViolationError

__all__ = ["CHAIN_SHARE", "HOST_FLOATS", "StepEdits", "Wanted", "WantedReader", "host_view"]

_NEG = float("-inf")
_FLOAT32_MAX = float(np.finfo(np.float32).max)
_FEW_EDITS = 8
"""Up to this many edits a step on host logits are written one by one (``_apply_each``)."""
_FEW_ROWS = 4
"""Up to this many rows of host logits, ``WantedReader.read`` weighs each in plain floats."""

CHAIN_SHARE = 0.5
"""The share of the model's probability on ``,`` and ``;`` from which it wants to chain a clause
(``ClauseEnd``): more than on anything else; below it ``Wanted.chain_share`` is only bounded."""
_LOG_CHAIN_SHARE = math.log(CHAIN_SHARE)

Ids = torch.Tensor | np.ndarray | Sequence[int]
"""Token ids: a CPU tensor, an array or a list."""


@dataclass(frozen=True)
class Wanted:
    """What the model's unmasked scores put on ending and citing, for one row."""

    end_over_open: float
    """The probability of the tokens that begin with a sentence terminator over that of the
    marker openers the masks still allow (``inf`` where they allow none)."""
    may_open: bool
    """Whether the masks allow any marker opener."""
    may_end: bool
    """Whether the masks allow any sentence-ending token."""
    chain_over_open: float = 0.0
    """The probability of the tokens that chain a clause (``,`` ``;``) over that of the allowed
    marker openers, where the reader was given them (else 0)."""
    chain_share: float = 0.0
    """The probability of those tokens among all (the softmax's) where it may reach
    ``CHAIN_SHARE``; 0 where it cannot (or where the reader was not given them)."""


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
                emptied = self._emptied(host, doubtful, allowed, r, c, np.isfinite(kept))
                if emptied:
                    self._remove_in_turn(host, emptied, r, c, kept)
            return
        if not doubtful.shape[0]:
            logits[_indices(logits, r, c)] = _NEG
            return
        rows, ids = _indices(logits, r, c)
        kept_logits = logits[rows, ids]
        logits[rows, ids] = _NEG
        emptied = self._emptied(
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

    @staticmethod
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


class WantedReader:
    """Reads ``Wanted`` for a batch's rows: small gathers, none of the whole vocabulary.

    ``before`` the masks, the scores of the sentence enders and marker openers; which of those
    the masks allow is told by them ahead (``allowed``, from the grammar's bitmask) or read
    ``after`` them; ``Wanted`` is computed from both on the host, in float64. Ending and
    citing are weighed by the ratio of their probabilities, which needs no softmax normalizer;
    given ``chainers``, the normalizers of the rows whose levers may read the chainers' share of
    all the probability are read too (``before``'s ``shares``; one reduction per such row).
    ``read`` does it all before the masks; for a few rows of host logits it reads each row's
    scores once and weighs them in plain floats, the fewest operations a step can run.
    """

    def __init__(
        self,
        enders: torch.Tensor,
        openers: torch.Tensor,
        device: torch.device,
        chainers: torch.Tensor | None = None,
    ) -> None:
        chain = chainers if chainers is not None else enders[:0]
        self._ids = torch.cat([enders, openers, chain]).to(device)[None, :]
        self._split = len(enders)
        self._chain = len(enders) + len(openers)
        self._rows: dict[tuple[int, ...], torch.Tensor] = {}
        self._host_ids = self._ids[0].cpu().numpy()
        self._words, self._bits = self._host_ids >> 5, self._host_ids & 31

    @property
    def ids(self) -> np.ndarray:
        """The ids read: the enders', the openers', then the chainers'."""
        return self._host_ids

    def allowed(self, words: np.ndarray | None, rows: Sequence[int]) -> np.ndarray:
        """Which of the reader's ids each of ``rows`` of a grammar's bitmask ``words`` allows.

        ``words``: xgrammar's bitmask as an array (``None``: no bitmask, every id allowed); one
        row of flags per row, in the order of ``read``'s scores.
        """
        if words is None:
            return np.ones((len(rows), self._host_ids.shape[0]), dtype=bool)
        flags: np.ndarray = ((words[list(rows)][:, self._words] >> self._bits) & 1).astype(bool)
        return flags

    def read(
        self,
        logits: torch.Tensor,
        rows: Sequence[int],
        allowed: np.ndarray,
        *,
        shares: Callable[[int], bool] | None = None,
        may_share: Callable[[int], bool] | None = None,
        host: np.ndarray | None = None,
    ) -> dict[int, Wanted]:
        """``Wanted`` for ``rows`` from the scores before any mask and what the masks will allow.

        ``allowed``: per row, which of the reader's ids the masks leave (``allowed``, and a quote
        guard's mask), known before the logits; a score that is not finite is not allowed
        either, as after the masks. ``shares``, ``may_share``: as ``before``'s. ``host``: the
        logits' memory as an array (``host_view``), where the caller has it.
        """
        host = host if host is not None else host_view(logits)
        if host is not None and len(rows) <= _FEW_ROWS:
            found = self._read_few(host, rows, allowed, shares, may_share)
            if found is not None:
                return found
        raw = self.before(logits, rows, shares=shares, may_share=may_share, host=host)
        width = self._host_ids.shape[0]
        return self._wanted(raw, np.isfinite(raw[:, :width]) & allowed, rows)

    def _read_few(
        self,
        host: np.ndarray,
        rows: Sequence[int],
        allowed: np.ndarray,
        shares: Callable[[int], bool] | None,
        may_share: Callable[[int], bool] | None,
    ) -> dict[int, Wanted] | None:
        """``read`` row by row in plain floats: one gather and one list per row.

        ``None`` where a score is NaN or +inf (the arrays' path weighs those).
        """
        split, chain, ids = self._split, self._chain, self._host_ids
        chained_too = ids.shape[0] > chain
        found: dict[int, Wanted] = {}
        for row, flags in zip(rows, allowed.tolist(), strict=True):
            values: list[float] = host[row][ids].tolist()
            if not sum(values) < math.inf:
                return None
            finite = [flag and value > _NEG for flag, value in zip(flags, values, strict=True)]
            open_sum = _logsumexp_of(
                [value for value, kept in zip(values[split:chain], finite[split:chain],
                                              strict=True) if kept]
            )
            ratio = _logsumexp_of(values[:split]) - open_sum
            chain_ratio = share = _NEG
            if chained_too:
                chained = _logsumexp_of(values[chain:])
                chain_ratio = chained - open_sum
                share = chained - self._normalizer_of(
                    host, row, chained, max(values), shares, may_share
                )
            found[row] = Wanted(
                _exp(ratio), any(finite[split:chain]), any(finite[:split]),
                _exp(chain_ratio, empty=0.0), min(1.0, _exp(share, empty=0.0)),
            )
        return found

    @staticmethod
    def _normalizer_of(
        host: np.ndarray,
        row: int,
        chained: float,
        best_read: float,
        shares: Callable[[int], bool] | None,
        may_share: Callable[[int], bool] | None,
    ) -> float:
        """``_normalizers`` for one row of host logits (``best_read``: its best score read)."""
        if may_share is not None and not may_share(row):
            return math.inf
        # The row's best score is at least the best of those read: most rows end here.
        if chained - best_read < _LOG_CHAIN_SHARE:
            return math.inf
        if chained - float(host[row].max()) < _LOG_CHAIN_SHARE:
            return math.inf
        if shares is not None and not shares(row):
            return math.inf
        return float(torch.logsumexp(torch.from_numpy(host[row]), dim=-1))

    def before(
        self,
        logits: torch.Tensor,
        rows: Sequence[int],
        *,
        shares: Callable[[int], bool] | None = None,
        may_share: Callable[[int], bool] | None = None,
        host: np.ndarray | None = None,
    ) -> np.ndarray:
        """The enders', openers' (and chainers') scores in ``rows`` before any mask.

        With chainers, each row's log-normalizer comes last (``_normalizers``); ``shares``
        tells of a row whether its levers may read the chainers' share at this step (``None``:
        all of them), and is asked only where one max leaves the share open. ``host``: as
        ``read``'s.
        """
        host = host if host is not None else host_view(logits)
        scores: np.ndarray
        if host is not None:
            scores = host[self._index(rows).numpy(), self._host_ids].astype(np.float32, copy=False)
        else:
            scores = logits[self._index(rows), self._ids].float().cpu().numpy()
        if self._ids.shape[1] > self._chain:
            normalizers = self._normalizers(logits, rows, scores, shares, may_share)
            scores = np.concatenate([scores, normalizers[:, None]], axis=1)
        return scores

    def _normalizers(
        self,
        logits: torch.Tensor,
        rows: Sequence[int],
        scores: np.ndarray,
        shares: Callable[[int], bool] | None,
        may_share: Callable[[int], bool] | None = None,
    ) -> np.ndarray:
        """Each row's log-normalizer where the chainers may hold ``CHAIN_SHARE`` of its probability.

        Elsewhere ``inf`` (a share of 0): their share is at most ``exp(chained - top)``, so a row
        whose chainers fall ``-log CHAIN_SHARE`` below its top score is settled by one max, not
        a logsumexp over the vocabulary; so is a row whose levers will not read it (``shares``),
        and one whose chainers fall that far below the best of its scores read (``scores``),
        which no top is below. ``may_share``: a cheaper first word on that, asked before any
        row is reduced; ``shares`` is asked only of the rows the max leaves open.
        """
        normalizers = np.full(len(rows), math.inf, dtype=np.float32)
        # The rows' levers say first (a few comparisons each); only their rows are reduced.
        asked = [k for k, row in enumerate(rows) if may_share is None or may_share(row)]
        if not asked:
            return normalizers
        chained = torch.logsumexp(torch.from_numpy(scores[asked, self._chain:]), dim=-1)
        best_read = torch.from_numpy(scores[asked].max(axis=1))
        close = (chained - best_read >= _LOG_CHAIN_SHARE).tolist()
        near = [j for j, may in enumerate(close) if may]
        if not near:
            return normalizers
        asked, chained = [asked[j] for j in near], chained[near]
        own = logits[torch.tensor([rows[k] for k in asked], device=logits.device)].float()
        maybe = (chained - own.amax(dim=-1).cpu() >= _LOG_CHAIN_SHARE).tolist()
        picked = [
            j for j, may in enumerate(maybe) if may and (shares is None or shares(rows[asked[j]]))
        ]
        if picked:
            reduced = torch.logsumexp(own[picked], dim=-1).cpu().numpy()
            normalizers[[asked[j] for j in picked]] = reduced
        return normalizers

    def _index(self, rows: Sequence[int]) -> torch.Tensor:
        key = tuple(rows)
        index = self._rows.get(key)
        if index is None:
            if len(self._rows) > 64:  # one reader serves every loop of its Steering: bounded
                self._rows.clear()
            index = self._rows[key] = torch.tensor(key, device=self._ids.device)[:, None]
        return index

    def after(
        self, raw: np.ndarray, logits: torch.Tensor, rows: Sequence[int]
    ) -> dict[int, Wanted]:
        """``Wanted`` for ``rows``, from their scores ``before`` and the masked ``logits``."""
        host = host_view(logits)
        if host is not None:
            finite = np.isfinite(host[self._index(rows).numpy(), self._host_ids])
        else:
            finite = torch.isfinite(logits[self._index(rows), self._ids]).cpu().numpy()
        return self._wanted(raw, finite, rows)

    def _wanted(
        self, raw: np.ndarray, finite: np.ndarray, rows: Sequence[int]
    ) -> dict[int, Wanted]:
        """``Wanted`` for ``rows`` from their scores ``before`` and which of them are allowed."""
        raw = raw.astype(np.float64)  # as ``_read_few``'s plain floats
        split, chain = self._split, self._chain
        allowed_open = np.where(finite[:, split:chain], raw[:, split:chain], -np.inf)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            # log(p_end / p_open): the normalizer cancels out.
            open_sum = _logsumexp(allowed_open)
            log_ratio = _logsumexp(raw[:, :split]) - open_sum
            if raw.shape[1] > chain:
                chained = _logsumexp(raw[:, chain:-1])
                chain_ratio, chain_log_share = chained - open_sum, chained - raw[:, -1]
            else:
                chain_ratio = chain_log_share = np.full(len(rows), -np.inf)
        may_open: list[bool] = np.any(finite[:, split:chain], axis=1).tolist()
        may_end: list[bool] = np.any(finite[:, :split], axis=1).tolist()
        return {
            row: Wanted(
                _exp(ratio), bool(opens), bool(ends), _exp(chained, empty=0.0),
                min(1.0, _exp(share, empty=0.0)),
            )
            for row, ratio, opens, ends, chained, share in zip(
                rows, log_ratio.tolist(), may_open, may_end, chain_ratio.tolist(),
                chain_log_share.tolist(), strict=True,
            )
        }


def _shown(value: torch.Tensor | np.ndarray | float) -> str:
    if isinstance(value, np.ndarray):
        value = torch.from_numpy(value)
    if isinstance(value, torch.Tensor):
        bad = value[~torch.isfinite(value.to(torch.float32))]
        return f"{bad.numel()} of {value.numel()} values, e.g. {bad.flatten()[0].item()!r}"
    return repr(value)


def _logsumexp(scores: np.ndarray) -> np.ndarray:
    top = scores.max(axis=1)
    finite_top = np.where(np.isfinite(top), top, 0.0)
    summed: np.ndarray = np.log(np.exp(scores - finite_top[:, None]).sum(axis=1)) + finite_top
    return summed


def _logsumexp_of(values: list[float]) -> float:
    """``_logsumexp`` of one row in plain floats (none NaN or +inf): -inf where all are."""
    top = max(values, default=_NEG)
    if top == _NEG:
        return _NEG
    return math.log(sum([math.exp(value - top) for value in values])) + top


def _exp(value: float, empty: float = math.inf) -> float:
    """``exp(value)``; ``empty`` for NaN (no token of either group allowed or given)."""
    if math.isnan(value):
        return empty
    return math.exp(value) if value < 700 else math.inf


def _as_ids(ids: Ids) -> np.ndarray:
    if isinstance(ids, torch.Tensor):
        return ids.numpy()
    return np.asarray(ids, dtype=np.int64)


def _members(rows: np.ndarray, size: int) -> np.ndarray:
    """A table of ``size`` booleans, true at ``rows``: ``table[r]`` tells whether r is one."""
    table = np.zeros(size, dtype=bool)
    table[rows] = True
    return table


HOST_FLOATS = {np.dtype(np.float32): torch.float32, np.dtype(np.float64): torch.float64}
"""The float types ``host_view`` gives arrays of, and torch's name of each."""


def host_view(logits: torch.Tensor) -> np.ndarray | None:
    """The memory of ``logits`` as an array, where they are host floats numpy computes alike.

    A small read or write there costs a few microseconds; torch's dispatch of the same
    indexed operation costs ten times more right after the model's forward pass, and so does
    each of torch's attribute reads: one conversion tells the device and the type at once.
    ``None`` on an accelerator and for 16-bit floats.
    """
    try:
        try:
            host = logits.numpy()
        except RuntimeError:  # a tensor that requires grad (the one the first try misses)
            host = logits.detach().numpy()
    except (RuntimeError, TypeError, NotImplementedError):  # on an accelerator, or bfloat16
        return None
    return host if host.dtype in HOST_FLOATS else None


def _to(logits: torch.Tensor, array: np.ndarray) -> torch.Tensor:
    tensor = torch.from_numpy(array)
    return tensor if logits.device.type == "cpu" else tensor.to(logits.device, non_blocking=True)


def _indices(logits: torch.Tensor, rows: np.ndarray, ids: np.ndarray) -> tuple[torch.Tensor, ...]:
    return _to(logits, rows.astype(np.int64)), _to(logits, ids.astype(np.int64, copy=False))
