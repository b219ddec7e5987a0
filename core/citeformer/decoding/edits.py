"""One step's lever changes over a whole batch, applied in a few tensor operations.

A lever never touches the logits itself: for the row being steered it asks ``StepEdits`` to
remove tokens (``remove``, keeping at least one) or to add finite values to some (``add``), and
reads what the model wanted before the masks (``wanted``). Once every row's levers have spoken,
``apply`` makes all the removals in one indexed write and all the additions in one accumulating
write, ordered by round (each row's first addition, then its second, ...), so each logit receives
its additions in the order its row's levers made them and the floats come out as if each lever
had written its own. Index arrays are built on the host and sent to the logits' device once per
write; the logits never leave it.

``Wanted`` is the model's own choice between ending a sentence and opening a marker, from the
scores before any mask, read for every row that asks at once (``WantedReader``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from citeformer.errors import GrammarViolationError

__all__ = ["CHAIN_SHARE", "StepEdits", "Wanted", "WantedReader"]

_NEG = float("-inf")
_FLOAT32_MAX = float(np.finfo(np.float32).max)

CHAIN_SHARE = 0.5
"""The share of the model's probability on ``,`` and ``;`` from which it wants to chain a clause
(``ClauseEnd``): more than on anything else; below it ``Wanted.chain_share`` is only bounded."""

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

    ``row`` is the logits row now being steered; set it before calling that row's levers.
    ``wanted``: per row, what the model wanted (rows whose levers read the model's scores).
    ``allowed``: per row, how many tokens the masks left, where known; a row whose removals
    number fewer cannot be emptied by them and is not checked.
    """

    def __init__(
        self, wanted: dict[int, Wanted] | None = None, allowed: dict[int, int] | None = None
    ) -> None:
        self.row = 0
        self._wanted = wanted or {}
        self._allowed = allowed or {}
        self._removals: list[tuple[int, np.ndarray]] = []
        # (the row's how-many-th addition, row, ids, value)
        self._additions: list[tuple[int, int, np.ndarray, np.ndarray | float]] = []
        self._added: dict[int, int] = {}

    def remove(self, ids: Ids) -> None:
        """Remove ``ids`` from this row (-inf), unless that would leave no token at all."""
        found = _as_ids(ids)
        if found.shape[0]:
            self._removals.append((self.row, found))

    def add(self, ids: Ids, value: torch.Tensor | float) -> None:
        """Add ``value`` (one float, or one per id) to the logits of ``ids`` in this row.

        ``ids`` must not repeat an id; a removed token stays removed. A value that is not a
        finite float32 raises ``GrammarViolationError`` (the row's edits are rolled back where
        the steering is told of errors): an infinite addition would turn a removed token's -inf
        into NaN, which a sampler may pick.
        """
        found = _as_ids(ids)
        if found.shape[0]:
            count = self._added.get(self.row, 0)
            if isinstance(value, torch.Tensor):
                amount: np.ndarray | float = value.to(torch.float32).numpy()
                finite = bool(np.isfinite(amount).all())
            else:
                amount = value
                finite = math.isfinite(value) and abs(value) <= _FLOAT32_MAX
            if not finite:
                raise GrammarViolationError(
                    f"a lever asked to add a value that is not a finite float32 to row "
                    f"{self.row} ({_shown(value)}); its logits are left as the masks made them"
                )
            self._additions.append((count, self.row, found, amount))
            self._added[self.row] = count + 1

    def wanted(self) -> Wanted | None:
        """What the model wanted at this row, or ``None`` where its scores were not read."""
        return self._wanted.get(self.row)

    def mark(self) -> tuple[int, int]:
        """A point to ``rollback`` to (the edits so far)."""
        return len(self._removals), len(self._additions)

    def rollback(self, mark: tuple[int, int]) -> None:
        """Forget the edits made after ``mark`` (a lever of the row ``row`` failed)."""
        removals, additions = mark
        del self._removals[removals:]
        del self._additions[additions:]
        self._added[self.row] = sum(1 for _, row, _, _ in self._additions if row == self.row)

    def apply(self, logits: torch.Tensor) -> None:
        """Make every edit asked for in ``logits`` (``[rows, vocab]``, in place)."""
        if self._removals:
            self._apply_removals(logits)
        if self._additions:
            self._apply_additions(logits)

    def _apply_additions(self, logits: torch.Tensor) -> None:
        # One accumulating write, ordered by each row's first additions, then its second, ...: a
        # logit two levers raise gets them in the order the levers acted (on a CPU the write
        # adds its duplicates in order), so the floats are those of one write per lever.
        additions = sorted(self._additions, key=lambda addition: addition[0])
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
        logits.index_put_(
            _indices(logits, r, c), _to(logits, v).to(logits.dtype), accumulate=True
        )

    def _apply_removals(self, logits: torch.Tensor) -> None:
        lengths = np.array([ids.shape[0] for _, ids in self._removals])
        rows = np.array([row for row, _ in self._removals])
        r, c = _indices(
            logits, np.repeat(rows, lengths), np.concatenate([ids for _, ids in self._removals])
        )
        removed: dict[int, int] = {}
        for row, count in zip(rows.tolist(), lengths.tolist(), strict=True):
            removed[row] = removed.get(row, 0) + count
        doubtful = sorted(
            row for row, count in removed.items()
            if row not in self._allowed or count >= self._allowed[row]
        )
        if not doubtful:
            logits[r, c] = _NEG
            return
        kept = logits[r, c]
        logits[r, c] = _NEG
        # One read of the doubtful rows alone.
        best = logits[torch.tensor(doubtful, device=logits.device)].amax(-1).tolist()
        emptied = {row for row, top in zip(doubtful, best, strict=True) if top == _NEG}
        if not emptied:
            return
        # A row the removals together would empty: undo them, then make them one by one, each
        # only where it leaves a token (as levers acting in turn would).
        undo = torch.isin(r, torch.tensor(sorted(emptied), device=r.device))
        logits[r[undo], c[undo]] = kept[undo]
        for row, ids in self._removals:
            if row in emptied:
                line, where = logits[row], _to(logits, ids)
                before = line[where].clone()
                line[where] = _NEG
                if not torch.isfinite(line).any():
                    line[where] = before


class WantedReader:
    """Reads ``Wanted`` for a batch's rows: two small gathers, none of the whole vocabulary.

    ``before`` the masks, the scores of the sentence enders and marker openers; ``after`` them,
    which of those are still allowed; ``Wanted`` is computed from both on the host. Ending and
    citing are weighed by the ratio of their probabilities, which needs no softmax normalizer;
    given ``chainers``, the normalizers of the rows whose levers may read the chainers' share of
    all the probability are read too (``before``'s ``shares``; one reduction per such row).
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

    def before(
        self,
        logits: torch.Tensor,
        rows: Sequence[int],
        *,
        shares: Callable[[int], bool] | None = None,
        may_share: Callable[[int], bool] | None = None,
    ) -> np.ndarray:
        """The enders', openers' (and chainers') scores in ``rows`` before any mask.

        With chainers, each row's log-normalizer comes last (``_normalizers``); ``shares``
        tells of a row whether its levers may read the chainers' share at this step (``None``:
        all of them), and is asked only where one max leaves the share open.
        """
        index = self._index(rows)
        scores = logits[index, self._ids].float()
        if self._ids.shape[1] > self._chain:
            normalizers = self._normalizers(logits, rows, scores, shares, may_share)
            scores = torch.cat([scores, normalizers[:, None]], dim=1)
        return scores.cpu().numpy()

    def _normalizers(
        self,
        logits: torch.Tensor,
        rows: Sequence[int],
        scores: torch.Tensor,
        shares: Callable[[int], bool] | None,
        may_share: Callable[[int], bool] | None = None,
    ) -> torch.Tensor:
        """Each row's log-normalizer where the chainers may hold ``CHAIN_SHARE`` of its probability.

        Elsewhere ``inf`` (a share of 0): their share is at most ``exp(chained - top)``, so a row
        whose chainers fall ``-log CHAIN_SHARE`` below its top score is settled by one max, not
        a logsumexp over the vocabulary; so is a row whose levers will not read it (``shares``).
        ``may_share``: a cheaper first word on that, asked before any row is reduced; ``shares``
        is asked only of the rows the max leaves open.
        """
        chained = torch.logsumexp(scores[:, self._chain:], dim=-1)
        normalizers = torch.full_like(chained, math.inf)
        # The rows' levers say first (a few comparisons each); only their rows are reduced.
        asked = [k for k, row in enumerate(rows) if may_share is None or may_share(row)]
        if not asked:
            return normalizers
        own = logits[torch.tensor([rows[k] for k in asked], device=logits.device)].float()
        maybe = (chained[asked] - own.amax(dim=-1) >= math.log(CHAIN_SHARE)).tolist()
        picked = [
            j for j, may in enumerate(maybe) if may and (shares is None or shares(rows[asked[j]]))
        ]
        if picked:
            normalizers[[asked[j] for j in picked]] = torch.logsumexp(own[picked], dim=-1)
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
        finite = torch.isfinite(logits[self._index(rows), self._ids]).cpu().numpy()
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


def _shown(value: torch.Tensor | float) -> str:
    if isinstance(value, torch.Tensor):
        bad = value[~torch.isfinite(value.to(torch.float32))]
        return f"{bad.numel()} of {value.numel()} values, e.g. {bad.flatten()[0].item()!r}"
    return repr(value)


def _logsumexp(scores: np.ndarray) -> np.ndarray:
    top = scores.max(axis=1)
    finite_top = np.where(np.isfinite(top), top, 0.0)
    summed: np.ndarray = np.log(np.exp(scores - finite_top[:, None]).sum(axis=1)) + finite_top
    return summed


def _exp(value: float, empty: float = math.inf) -> float:
    """``exp(value)``; ``empty`` for NaN (no token of either group allowed or given)."""
    if math.isnan(value):
        return empty
    return math.exp(value) if value < 700 else math.inf


def _as_ids(ids: Ids) -> np.ndarray:
    if isinstance(ids, torch.Tensor):
        return ids.numpy()
    return np.asarray(ids, dtype=np.int64)


def _to(logits: torch.Tensor, array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(array).to(logits.device, non_blocking=True)


def _indices(logits: torch.Tensor, rows: np.ndarray, ids: np.ndarray) -> tuple[torch.Tensor, ...]:
    return _to(logits, rows.astype(np.int64)), _to(logits, ids.astype(np.int64, copy=False))
