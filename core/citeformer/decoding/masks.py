"""Writing a step's masks into a batch of logits on the host or a device, cheaply.

``MaskPlan`` writes the grammar's packed bitmask, the way each row's count of kept tokens makes
cheapest on a CPU; ``apply_guards`` the quote guards' masks with one host read; ``keep_only``
keeps a few entries of some rows and fills the rest. On a CPU, ``keep_only`` (the bitmask's and
the quote guards' few-kept rows), the bitmask's in-between rows and, in a plan made ahead, its
rows that forbid very few tokens write through a numpy view of the logits' bits: right after a
model's forward pass on the same CPU, each kind of operation a step runs for the first time runs
on cold caches, and numpy's few kinds cost there a fraction of torch's dispatch
(benchmarks/README.md, "The step's caches are cold beside a host model").
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
import xgrammar as xgr

from citeformer.decoding.edits import HOST_FLOATS, host_view
from citeformer.decoding.quote_guard import Mask, QuoteGuard
from citeformer.errors import GrammarViolationError

__all__ = ["MaskPlan", "apply_bitmask", "apply_guards", "keep_only"]


_NEG = float("-inf")


class MaskPlan:
    """How to set the logits a filled bitmask forbids to -inf, in the rows ``indices``.

    On a GPU, xgrammar's kernel. On a CPU xgrammar's kernel writes one forbidden token at a time:
    fast where few are (0.04 ms for 32 rows of prose), slow where most are (3 ms for 32 rows inside
    markers). There each row is masked the way its count of kept tokens (numpy's bit count) makes
    cheapest: xgrammar's kernel where a third or less are forbidden, a fill of the row around the
    few it keeps where it keeps at most ``1/64`` of them (inside a marker), and in between the bits
    unpacked and selected into the logits without a branch (``_select``). The plan is made from the
    bitmask alone (``host``: for logits on the host), so it can be made before the logits are.
    ``ahead``: it is made so, off the step's critical path; a row that forbids at most ``1/32`` of
    the tokens (prose) then has those ids listed and set through numpy, one kind of operation
    fewer in the step than xgrammar's kernel, which costs many times more on the caches a host
    model's forward pass leaves cold (benchmarks/README.md). In the step, listing them would cost
    more than the kernel saves.
    """

    def __init__(
        self,
        bitmask: torch.Tensor,
        indices: list[int],
        vocab_size: int,
        *,
        host: bool = True,
        dtype: torch.dtype = torch.float32,
        ahead: bool = False,
    ) -> None:
        self.bitmask = bitmask
        self.indices = indices
        self.counts: dict[int, int] = {}
        """How many tokens each row keeps, where that costs nothing more (on a CPU, numpy 2);
        after ``forbid``, those it forbids too are not counted."""
        self._width = min(vocab_size, bitmask.shape[-1] * 32)
        self._planned_for: tuple[torch.dtype, int] | None = None
        """The logits' dtype and masked width the plan is for (``None``: not made yet)."""
        self._few: list[int] = []
        self._sparse: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        """Rows keeping few tokens: those rows, and the (row, id) pairs they keep."""
        self._scattered: tuple[np.ndarray, np.ndarray] | None = None
        """Rows forbidding very few tokens: the (row, id) pairs they forbid."""
        self._listed: list[int] = []
        """The rows of ``_scattered``."""
        self._middle: tuple[list[int], np.ndarray] | None = None
        """Rows in between: those rows, and their keep masks (``_keep_ones``)."""
        self._extra: tuple[np.ndarray, np.ndarray] | None = None
        """The (row, id) pairs ``forbid`` added, which the bitmask allows."""
        self._merged = False
        """Whether ``_scattered`` holds ``_extra`` (else they are written alone)."""
        if host:
            self._plan(dtype, self._width, ahead=ahead)

    @property
    def listed(self) -> list[int]:
        """The rows whose forbidden ids the plan lists and sets through numpy (made ahead)."""
        return self._listed

    def forbid(self, extra: dict[int, np.ndarray]) -> list[int]:
        """Forbid ``extra``'s ids too, in the ``listed`` rows: in the same write as their own.

        A lever's removals known before the logits (``StepEdits.removals_of``) cost the step
        no write of their own. A row they would leave without a token is left out (the edits
        keep one), and so is a row not listed. Returns the rows whose ids were taken.
        """
        listed = set(self.listed)
        rows, ids_of, taken = [], [], []
        for row, asked in extra.items():
            ids = np.unique(asked)
            if row not in listed or (ids.shape[0] and ids[-1] >= self._width):
                continue
            words = self.bitmask[row].numpy()
            newly = ids[((words[ids >> 5] >> (ids & 31)) & 1).astype(bool)]
            if newly.shape[0] >= self.counts[row]:
                continue
            self.counts[row] -= newly.shape[0]
            rows.append(np.full(newly.shape[0], row, dtype=np.int64))
            ids_of.append(newly.astype(np.int64, copy=False))
            taken.append(row)
        if taken:
            added = np.concatenate(rows), np.concatenate(ids_of)
            had = self._extra or (added[0][:0], added[1][:0])
            self._extra = np.concatenate([had[0], added[0]]), np.concatenate([had[1], added[1]])
            assert self._scattered is not None  # the rows are listed
            r, c = self._scattered
            self._scattered = np.concatenate([r, added[0]]), np.concatenate([c, added[1]])
            self._merged = True
        return taken

    def _plan(self, dtype: torch.dtype, width: int, *, ahead: bool) -> None:
        self._planned_for = (dtype, width)
        self.counts, self._few, self._sparse, self._middle = {}, [], None, None
        self._scattered, self._merged = None, False
        self._listed = []
        indices = self.indices
        packed = self.bitmask[indices].numpy()
        if not hasattr(np, "bitwise_count"):  # numpy 1: no count, every row selected
            self._middle = (indices, _keep_ones(_unpacked(packed, width), dtype))
            return
        words = packed[:, : -(-width // 32)].view(np.uint32)  # bitwise_count counts |x| if signed
        if width % 32:  # ``packed`` is a copy (rows picked by index); bits past width unused
            words[:, -1] &= (1 << (width % 32)) - 1  # no bit past the vocabulary
        kept = np.bitwise_count(words).sum(axis=1)
        self.counts = dict(zip(indices, kept.tolist(), strict=True))
        if self._extra is not None:  # planned again: ``forbid``'s ids are still forbidden
            for row, count in zip(*np.unique(self._extra[0], return_counts=True), strict=True):
                self.counts[int(row)] -= int(count)
        forbidden = width - kept
        kinds = np.where(3 * forbidden < width, 0, np.where(64 * kept <= width, 1, 2))
        if ahead:  # listing a row's few forbidden ids costs the step nothing
            kinds[32 * forbidden <= width] = 3
        if dtype is torch.float64:  # xgrammar's kernel takes 32- and 16-bit floats
            kinds[kinds == 0] = 2
        rows_of = np.asarray(indices)
        self._few = rows_of[kinds == 0].tolist()
        sparse = np.flatnonzero(kinds == 1)
        if len(sparse):  # few kept: save them, fill the rows, put them back
            at, ids = _set_bits(words[sparse])
            self._sparse = (rows_of[sparse], rows_of[sparse][at], ids)
        scattered = np.flatnonzero(kinds == 3)
        if len(scattered):  # very few forbidden (prose): those set alone
            at, ids = _set_bits(~words[scattered])
            inside = ids < width  # the inverted last word's bits past the vocabulary
            self._scattered = (rows_of[scattered][at[inside]], ids[inside])
            self._listed = rows_of[scattered].tolist()
        middle = np.flatnonzero(kinds == 2)
        if len(middle):
            self._middle = (
                rows_of[middle].tolist(), _keep_ones(_unpacked(packed[middle], width), dtype)
            )

    def apply(self, logits: torch.Tensor, *, host: np.ndarray | None = None) -> dict[int, int]:
        """Mask ``logits`` (in place) as planned; how many tokens each row keeps, where known.

        ``host``: their memory as an array (``host_view``), where the caller has it.
        """
        if host is not None:  # host floats: their type and width need no torch call
            dtype, columns = HOST_FLOATS[host.dtype], host.shape[-1]
        elif logits.device.type == "cpu":
            dtype, columns = logits.dtype, logits.shape[-1]
        else:
            bitmask = self.bitmask
            if bitmask.shape[0] < logits.shape[0]:  # made for fewer rows: the rest unread
                bitmask = torch.cat([bitmask, bitmask[:1].expand(
                    logits.shape[0] - bitmask.shape[0], -1)])
            mask = bitmask[: logits.shape[0]].to(logits.device, non_blocking=True)
            xgr.apply_token_bitmask_inplace(logits, mask, indices=self.indices)
            if self._extra is not None:
                at, ids = (torch.from_numpy(pairs).to(logits.device) for pairs in self._extra)
                logits[at, ids] = _NEG
            return {}
        width = min(columns, self._width)  # as xgrammar: ids past it untouched
        if self._planned_for != (dtype, width):  # not made, or for other logits
            self._plan(dtype, width, ahead=False)  # in the step
        if self._few:  # few tokens forbidden (prose): xgrammar's kernel writes only those
            xgr.apply_token_bitmask_inplace(logits, self.bitmask, indices=self._few)
        if self._sparse is not None:
            rows, r, c = self._sparse
            keep_only(logits, rows, r, c, width=width, host=host)
        if self._scattered is not None:
            r, c = self._scattered
            bits = _bits(logits, host)
            if len(self._listed) == 1:  # its view indexed by one array: the cheapest
                bits[self._listed[0]][c] = _NEG_BITS[dtype]
            else:
                bits[r, c] = _NEG_BITS[dtype]
        if self._extra is not None and not self._merged:  # planned again in the step
            r, c = self._extra
            _bits(logits, host)[r, c] = _NEG_BITS[dtype]
        if self._middle is not None:
            bits, neg = _bits(logits, host), _NEG_BITS[dtype]
            indices, ones = self._middle
            if indices == list(range(bits.shape[0])):
                _select(bits[:, :width], ones, neg)
            else:  # each row in place: an indexed read and write back cost three times more
                for k, i in enumerate(indices):
                    _select(bits[i, :width], ones[k], neg)
        return dict(self.counts)


def apply_bitmask(
    logits: torch.Tensor, bitmask: torch.Tensor, indices: list[int]
) -> dict[int, int]:
    """Set the logits of the tokens ``bitmask`` forbids to -inf, in the rows ``indices``.

    ``MaskPlan``'s plan made and applied at once. Returns how many tokens each row keeps, where
    that costs nothing more (on a CPU, with numpy 2).
    """
    return MaskPlan(
        bitmask, indices, logits.shape[-1], host=logits.device.type == "cpu", dtype=logits.dtype
    ).apply(logits)


def _set_bits(words: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The set bits of ``words`` (uint32, a row each): each one's row and bit position."""
    at, word = np.nonzero(words)  # only the words holding a set bit are unpacked
    bits = np.unpackbits(words[at, word].view(np.uint8)[:, None], axis=-1,
                         bitorder="little").reshape(len(at), 32)
    which, bit = np.nonzero(bits)
    return at[which], word[which] * 32 + bit


def _unpacked(packed: np.ndarray, width: int) -> np.ndarray:
    """The bits of ``packed`` (int32 words, a row each) as 0/1 bytes, ``width`` per row."""
    return np.unpackbits(packed.view(np.uint8), axis=-1, bitorder="little")[:, :width]


Index = torch.Tensor | np.ndarray | int
"""Row or token ids: a tensor on the logits' device, an array (logits on a CPU) or one id."""


def keep_only(
    logits: torch.Tensor,
    rows: Index,
    r: Index,
    c: Index,
    *,
    width: int | None = None,
    host: np.ndarray | None = None,
) -> None:
    """Keep only the entries (``r``, ``c``) of ``rows``: the rest of those rows becomes -inf.

    In place; ``width``: only the first ``width`` ids of each row are filled (``None``: all). A
    mask that allows few tokens, written as two small indexed writes and one fill; on a CPU,
    on the floats' bits through numpy. ``host``: the logits' memory (``host_view``), if known.
    """
    if host is not None or logits.device.type == "cpu":
        bits, (at, ids) = _bits(logits, host), (_on_host(r), _on_host(c))
        neg = _NEG_BITS[HOST_FLOATS[host.dtype] if host is not None else logits.dtype]
        saved = bits[at, ids]
        for row in np.atleast_1d(_on_host(rows)).tolist():  # an indexed fill costs three times more
            bits[row, :width] = neg
        bits[at, ids] = saved
        return
    saved = logits[r, c]
    logits[rows, :width] = _NEG
    logits[r, c] = saved


def _on_host(ids: Index) -> np.ndarray | int:
    return ids.numpy() if isinstance(ids, torch.Tensor) else ids


def _bits(logits: torch.Tensor, host: np.ndarray | None = None) -> np.ndarray:
    """The memory of CPU ``logits`` as integers of their floats' width (``_BITS``).

    ``host``: that memory as floats (``host_view``), where the caller has it.
    """
    host = host if host is not None else host_view(logits)
    if host is not None:  # one conversion: numpy views the rest
        viewed: np.ndarray = host.view(_BITS[HOST_FLOATS[host.dtype]][1])
        return viewed
    bits: np.ndarray = logits.detach().view(_BITS[logits.dtype][0]).numpy()  # 16-bit floats
    return bits

_BITS = {
    torch.float32: (torch.int32, np.int32), torch.float64: (torch.int64, np.int64),
    torch.float16: (torch.int16, np.int16), torch.bfloat16: (torch.int16, np.int16),
}
"""The integer types (torch's, numpy's) as wide as each float type."""


_NEG_BITS = {
    dtype: int(torch.tensor(_NEG, dtype=dtype).view(ints)) for dtype, (ints, _) in _BITS.items()
}
"""The bits of -inf in each float type, as the integer of its width."""


def _keep_ones(keep: np.ndarray, dtype: torch.dtype) -> np.ndarray:
    """``keep`` (0/1 bytes) as integers of ``dtype``'s width: all ones where 1, zero where 0."""
    ones: np.ndarray = np.negative(keep.view(np.int8)).astype(_BITS[dtype][1])
    return ones


def _select(bits: np.ndarray, ones: np.ndarray, neg: int) -> None:
    """Set the floats whose ``bits`` these are to -inf where ``ones`` is zero, in place.

    ``ones``: ``_keep_ones``; ``neg``: the bits of -inf. Without a branch: ``((x ^ NEG) & m) ^
    NEG`` with ``m`` all ones where a token is kept and zero where not. A blend or masked fill
    branches per element and costs ten times more on a CPU where the allowed tokens are scattered
    over the ids (6 ms against 0.6 for 32 rows of SmolLM2's vocabulary, float32).
    """
    np.bitwise_xor(bits, neg, out=bits)
    np.bitwise_and(bits, ones, out=bits)
    np.bitwise_xor(bits, neg, out=bits)


def apply_guards(
    logits: torch.Tensor, guarded: Sequence[tuple[int, QuoteGuard, Mask]]
) -> list[tuple[int, GrammarViolationError]]:
    """Apply every row's quote mask in two indexed writes; the rows left with no token.

    A mask that allows few tokens saves them, fills its row and puts them back; one that
    denies some sets them. Whether any row was emptied is read once for all of them.
    """
    device = logits.device
    for allow in (False, True):
        picked = [
            (i, mask.ids) for i, _, mask in guarded if mask.allow is allow and (allow or mask.ids)
        ]
        if not picked:
            continue
        lengths = [len(ids) for _, ids in picked]
        r = torch.tensor(np.repeat([i for i, _ in picked], lengths), dtype=torch.long)
        c = torch.tensor(np.concatenate([np.asarray(ids, np.int64) for _, ids in picked]),
                         dtype=torch.long)
        r, c = r.to(device), c.to(device)
        if allow:
            keep_only(logits, torch.tensor([i for i, _ in picked], device=device), r, c)
        else:
            logits[r, c] = _NEG
    rows = torch.tensor([i for i, _, _ in guarded], device=device)
    alive = torch.isfinite(logits[rows]).any(dim=-1).tolist()  # one read for every row
    return [
        (i, GrammarViolationError(
            "no token satisfies both the citation grammar and the verbatim quote here; "
            f"answer state {guard.state[0]!r}"
        ))
        for (i, guard, _), live in zip(guarded, alive, strict=True) if not live
    ]
