"""What the model's unmasked scores put on ending a sentence, citing and chaining a clause.

``Wanted`` is that choice for one row; ``WantedReader`` reads it for every row that asks at once:
the scores of the sentence enders, the marker openers and the clause chainers before any mask,
and which of them the masks allow. ``host_view`` gives the memory of host float logits as an
array, which every host read and write of a step goes through.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import compress

import numpy as np
import torch

__all__ = ["CHAIN_SHARE", "HOST_FLOATS", "Wanted", "WantedReader", "host_view"]

_NEG = float("-inf")
_FEW_ROWS = 4
"""Up to this many rows of host logits, ``WantedReader.read`` weighs each in plain floats."""

CHAIN_SHARE = 0.5
"""The share of the model's probability on ``,`` and ``;`` from which it wants to chain a clause
(``ClauseEnd``): more than on anything else; below it ``Wanted.chain_share`` is only bounded."""
_LOG_CHAIN_SHARE = math.log(CHAIN_SHARE)


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

        ``None`` where a score is NaN or +inf (the arrays' path weighs those). The scores the
        masks leave are picked by their flags (``compress``); a -inf among them adds nothing to
        a sum, so the floats are those of the finite scores alone.
        """
        split, chain, ids = self._split, self._chain, self._host_ids
        chained_too = ids.shape[0] > chain
        found: dict[int, Wanted] = {}
        for row, flags in zip(rows, allowed.tolist(), strict=True):
            values: list[float] = host[row][ids].tolist()
            if not sum(values) < math.inf:
                return None
            open_sum = _logsumexp_of(list(compress(values[split:chain], flags[split:chain])))
            may_end = any(value > _NEG for value in compress(values[:split], flags[:split]))
            ratio = _logsumexp_of(values[:split]) - open_sum
            chain_ratio = share = _NEG
            if chained_too:
                chained = _logsumexp_of(values[chain:])
                chain_ratio = chained - open_sum
                share = chained - self._normalizer_of(
                    host, row, chained, max(values), shares, may_share
                )
            found[row] = Wanted(
                _exp(ratio), open_sum > _NEG, may_end,
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
        """``_normalizers`` for one row of host logits (``best_read``: its best score read).

        The checks in the order of their cost: a comparison of floats before ``may_share``'s
        look at the answer, which right after a host model's forward pass runs on cold caches.
        """
        # The row's best score is at least the best of those read: most rows end here.
        if chained - best_read < _LOG_CHAIN_SHARE:
            return math.inf
        if may_share is not None and not may_share(row):
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
    # ``value - top`` for each, in C: ``top.__rsub__(value)`` is that difference.
    return math.log(sum(map(math.exp, map(top.__rsub__, values)))) + top


def _exp(value: float, empty: float = math.inf) -> float:
    """``exp(value)``; ``empty`` for NaN (no token of either group allowed or given)."""
    if math.isnan(value):
        return empty
    return math.exp(value) if value < 700 else math.inf


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
