"""The steering core: the grammar's mask, the quote guard and the levers over a batch of logits.

Engine-neutral: it takes a batch of logits rows (a torch tensor, ``[rows, vocab]``) and, per
answer, a ``RowSteering`` that is told each token the engine generated (``advance``). It knows
nothing of an engine's call convention; ``citeformer.decoding.hf`` plugs it into transformers'
``generate``, ``citeformer.vllm`` into vLLM's logits processors, ``citeformer.llama_cpp`` into
llama-cpp-python's ``logits_processor`` hook.

At each step, for the rows given, as batch work on the logits' device: what the model's own
scores put on ending and citing is read for the rows whose levers need it (``Lever.needs_raw``),
before any mask; the rows' grammar matchers fill one bitmask in one call (xgrammar's thread pool),
each row's ``WordBound`` clears its over-long words in it, and it is applied once; each row's
quote guard removes what would break a quote; then the levers say what they change, lever by
lever across the rows (a ``Lever.batched`` class for all its rows in one call, one removal
entry per id array they share), each reading only its row's ``AnswerState`` (whose work per
token does not grow with the answer), and ``StepEdits`` makes the changes of all rows in a few
indexed writes. No step copies the logits to the host. The rows' tokens are accepted by their
matchers in one call (``advance_all``). A row whose engine already masks the grammar (a server's
structured outputs) has no matcher here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch
import xgrammar as xgr

from citeformer.decoding.edits import StepEdits, Wanted, WantedReader
from citeformer.decoding.levers import AnswerState, Lever, levers_for
from citeformer.decoding.quote_guard import QuoteGuard
from citeformer.decoding.vocab import Vocabulary
from citeformer.decoding.word_bound import (
    WordBound,
    bounds_words,
    counts_words,
    word_bound_for,
)
from citeformer.errors import GrammarViolationError
from citeformer.request import GenerationRequest

__all__ = [
    "RowSteering", "Steering", "accept_token", "advance_all", "keep_only", "local_grammar",
    "steering_for",
]


def accept_token(matcher: xgr.GrammarMatcher, token_id: int) -> None:
    """Advance ``matcher`` by one generated token, or raise if its grammar forbids the token."""
    if not matcher.accept_token(token_id):
        raise _refused(token_id)


class RowSteering:
    """What steers one answer: its grammar matcher, quote guard and levers, and its state.

    ``matcher``: ``None`` where the engine masks the grammar itself; ``word_bound``: what bounds
    its words where the matcher's grammar leaves them unbounded (``local_grammar``). ``advance``
    each generated token (never a stop token: the answer is over then) before the next step's
    logits.
    """

    def __init__(
        self,
        vocab: Vocabulary,
        *,
        matcher: xgr.GrammarMatcher | None = None,
        word_bound: WordBound | None = None,
        guard: QuoteGuard | None = None,
        levers: Sequence[Lever] = (),
    ) -> None:
        self.vocab = vocab
        self.state = AnswerState(vocab.token_bytes)
        """The answer so far, shared by every lever of the row."""
        self.matcher = matcher
        self.word_bound = word_bound
        self.guard = guard
        self.levers = tuple(levers)

    @property
    def levers(self) -> tuple[Lever, ...]:
        """The row's levers, in the order they act."""
        return self._levers

    @levers.setter
    def levers(self, levers: Sequence[Lever]) -> None:
        self._levers = tuple(levers)
        self.kinds = tuple(type(lever) for lever in self._levers)
        """The levers' classes: rows alike in them are steered lever by lever, together."""
        self._reading = tuple(lever for lever in self._levers if lever.needs_raw)
        self.needs_raw = bool(self._reading)
        """Whether a lever reads the model's scores from before the masks."""
        # The levers that may ever read the chainers' share (they say when, step by step).
        self._sharing = tuple(
            lever for lever in self._reading if type(lever).shares is not Lever.shares
        )

    def shares(self) -> bool:
        """Whether a lever may read the chainers' share of the probability at this step."""
        return any(lever.shares(self.state) for lever in self._sharing)

    def may_share(self) -> bool:
        """``shares``'s cheap part: ``False`` where it is sure to be ``False``."""
        return any(lever.may_share(self.state) for lever in self._sharing)

    def advance(self, token_id: int) -> None:
        """Move past one generated token, or raise if the grammar or a quote forbids it."""
        if self.matcher is not None:
            accept_token(self.matcher, token_id)
        self._advance_past_grammar(token_id)

    def _advance_past_grammar(self, token_id: int) -> None:
        if self.word_bound is not None:
            self.word_bound.advance(token_id)
        if self.guard is not None:
            self.guard.advance(token_id)
        self.state.append(token_id)

    def edit(self, edits: StepEdits) -> None:
        """Every lever's changes to this row (``edits.row``), in the order they act."""
        for lever in self.levers:
            lever.edit(self.state, edits)


def advance_all(
    rows: Sequence[RowSteering],
    tokens: Sequence[int],
    *,
    on_error: Callable[[int, Exception], None] | None = None,
) -> None:
    """Move every row past its generated token: ``rows[k]`` past ``tokens[k]``.

    The grammar matchers accept their tokens in one call. Where a row's grammar, word bound or
    quote forbids its token, ``on_error`` is told (k, error) and the other rows go on; without
    it, the error propagates.
    """
    matchers = {k: row.matcher for k, row in enumerate(rows) if row.matcher is not None}
    graded = list(matchers)
    refused: set[int] = set()
    if graded:
        accepted = xgr.BatchGrammarMatcher.batch_accept_token(
            list(matchers.values()), [tokens[k] for k in graded]
        )
        refused = {k for k, ok in zip(graded, accepted, strict=True) if not ok}
    for k, (row, token) in enumerate(zip(rows, tokens, strict=True)):
        try:
            if k in refused:
                raise _refused(token)
            row._advance_past_grammar(token)
        except Exception as error:
            if on_error is None:
                raise
            on_error(k, error)


_BATCHED_FROM = 4
"""The fewest rows a ``batched`` lever class steers in one call; fewer cost less row by row."""


def _edit_all(
    edits: StepEdits,
    rows: Sequence[tuple[int, RowSteering]],
    on_error: Callable[[int, Exception], None] | None,
) -> None:
    """Every row's levers ask ``edits`` for their changes, lever by lever across the rows.

    Rows alike in their levers' classes (``RowSteering.kinds``) take each lever together: a
    ``batched`` class in one call for all of them, any other row by row. Each row's levers still
    act in its own order. A row whose lever raises is told to ``on_error`` (without it the
    error propagates), its edits are forgotten and its later levers not asked.
    """
    alike: dict[tuple[type[Lever], ...], list[tuple[int, RowSteering]]] = {}
    for i, row in rows:
        alike.setdefault(row.kinds, []).append((i, row))
    failed: set[int] = set()

    def fail(i: int, error: Exception) -> None:
        if on_error is None:
            raise error
        edits.forget(i)
        failed.add(i)
        on_error(i, error)

    for kinds, members in alike.items():
        for position, kind in enumerate(kinds):
            live = [(i, row) for i, row in members if i not in failed] if failed else members
            if kind.batched and len(live) >= _BATCHED_FROM:
                mark = edits.mark()
                try:
                    kind.edit_rows([row.levers[position] for _, row in live],
                                   [row.state for _, row in live], [i for i, _ in live], edits)
                    continue
                except Exception:  # noqa: BLE001  (row by row, to tell which row failed)
                    edits.rollback(mark)
            for i, row in live:
                edits.row = i
                try:
                    row.levers[position].edit(row.state, edits)
                except Exception as error:
                    fail(i, error)


def _refused(token_id: int) -> GrammarViolationError:
    return GrammarViolationError(
        f"token {token_id} was generated but the citation grammar forbids it here; "
        "the logits were not masked with this answer's grammar"
    )


def local_grammar(request: GenerationRequest) -> str:
    """The grammar text a ``RowSteering``'s matcher is compiled from.

    The request's grammar with its quotes left to ``QuoteGuard``, its word length to
    ``WordBound`` where it ``bounds_words`` and its sentences' word count where it
    ``counts_words`` (``steering_for`` adds both): together they allow exactly the tokens of the
    grammar a serving engine is sent, and fill a mask several times faster.
    """
    return request.grammar_text(
        spell_quotes=False, bound_words=not bounds_words(request),
        count_words=not counts_words(request),
    )


def steering_for(
    request: GenerationRequest,
    vocab: Vocabulary,
    stop_ids: Sequence[int],
    *,
    matcher: xgr.GrammarMatcher | None,
) -> RowSteering:
    """The steering of one constrained request: its quote guard, levers and the given matcher.

    The same on every engine: ``matcher`` is the request's ``local_grammar`` compiled for the
    engine's vocabulary (``None`` where the engine masks the grammar itself), ``stop_ids`` the ids
    that end an answer there. Evidence left to the generator is lexical.
    """
    word_bound = None if matcher is None else word_bound_for(request, vocab, stop_ids)
    guard = None
    if request.quotable_chars is not None:
        guard = QuoteGuard(
            request.sources, vocab.sorted,
            min_quote_chars=request.grammar.min_quote_chars,
            quotable_chars=request.quotable_chars,
        )
    return RowSteering(
        vocab, matcher=matcher, word_bound=word_bound, guard=guard,
        levers=levers_for(request, vocab, stop_ids, request.default_evidence),
    )


class Steering:
    """Steers the rows of a batch of logits; one per decoding loop (it holds the bitmask)."""

    def __init__(self, vocab_size: int) -> None:
        self._vocab_size = vocab_size
        self._bitmask: torch.Tensor | None = None
        # As many threads as torch computes with (xgrammar's "auto" takes half the cores): the
        # model waits while the masks are filled, and a process pinned to one thread stays so.
        self._filler = xgr.BatchGrammarMatcher(max(1, torch.get_num_threads()))
        self._readers: dict[tuple[int, torch.device], WantedReader] = {}

    def apply(
        self,
        logits: torch.Tensor,
        rows: Sequence[tuple[int, RowSteering]],
        *,
        on_error: Callable[[int, Exception], None] | None = None,
    ) -> None:
        """Steer ``logits`` in place: ``rows`` pairs a row index of ``logits`` with its steering.

        Rows left out are untouched. ``on_error``: where a row's guard or levers raise, it is
        told (row index, error) and the other rows are steered still; without it, the error
        propagates.
        """
        if not rows:
            return
        reading = [i for i, row in rows if row.needs_raw]
        reader = self._reader(rows[0][1].vocab, logits.device) if reading else None
        raw = None
        if reader is not None:
            steered = dict(rows)
            raw = reader.before(
                logits, reading, shares=lambda i: steered[i].shares(),
                may_share=lambda i: steered[i].may_share(),
            )
        grammars = [(i, row.matcher) for i, row in rows if row.matcher is not None]
        allowed: dict[int, int] = {}
        if grammars:
            indices = [i for i, _ in grammars]
            bitmask = self._bitmask_for(logits.shape[0])
            # One call fills every row (on several threads where the machine has them).
            self._filler.batch_fill_next_token_bitmask(
                [matcher for _, matcher in grammars], bitmask, indices=indices
            )
            words = bitmask.numpy()  # the same memory: xgrammar's bitmask lives on the host
            for i, row in rows:
                if row.word_bound is not None:
                    row.word_bound.restrict(words[i])
            allowed = _apply_bitmask(logits, bitmask, indices)
        failed: set[int] = set()
        guarded = [(i, row.guard) for i, row in rows if row.guard is not None]
        if guarded:
            for i, _ in guarded:
                allowed.pop(i, None)  # the guard removes more
            for i, error in _apply_guards(logits, guarded):
                if on_error is None:
                    raise error
                on_error(i, error)
                failed.add(i)
        wanted: dict[int, Wanted] = {}
        if reader is not None and raw is not None:
            wanted = reader.after(raw, logits, reading)
        edits = StepEdits(wanted, allowed)
        _edit_all(edits, [(i, row) for i, row in rows if i not in failed], on_error)
        edits.apply(logits)

    def _reader(self, vocab: Vocabulary, device: torch.device) -> WantedReader:
        """The ``WantedReader`` of the vocabulary's enders, openers and chainers, built once."""
        key = (id(vocab), device)
        if key not in self._readers:
            self._readers[key] = WantedReader(
                vocab.enders, vocab.openers, device, chainers=vocab.chainers
            )
        return self._readers[key]


    def _bitmask_for(self, rows: int) -> torch.Tensor:
        if self._bitmask is None or self._bitmask.shape[0] < rows:
            self._bitmask = xgr.allocate_token_bitmask(rows, self._vocab_size)
        return self._bitmask


def _apply_bitmask(
    logits: torch.Tensor, bitmask: torch.Tensor, indices: list[int]
) -> dict[int, int]:
    """Set the logits of the tokens ``bitmask`` forbids to -inf, in the rows ``indices``.

    On a GPU, xgrammar's kernel. On a CPU xgrammar's kernel writes one forbidden token at a time:
    fast where few are (0.04 ms for 32 rows of prose), slow where most are (3 ms for 32 rows inside
    markers). There each row is masked the way its count of kept tokens (numpy's bit count) makes
    cheapest: xgrammar's kernel where a third or less are forbidden, a fill of the row around the
    few it keeps where it keeps at most ``1/64`` of them (inside a marker), and in between the bits
    unpacked in one call and selected into the logits without a branch (``_select``). Returns how
    many tokens each row keeps, where that costs nothing more (on a CPU, with numpy 2).
    """
    if logits.device.type != "cpu":
        mask = bitmask[: logits.shape[0]].to(logits.device, non_blocking=True)
        xgr.apply_token_bitmask_inplace(logits, mask, indices=indices)
        return {}
    packed = bitmask[indices].numpy()
    width = min(logits.shape[-1], packed.shape[-1] * 32)  # as xgrammar: ids past it untouched
    if not hasattr(np, "bitwise_count"):  # numpy 1: no count, every row selected
        _select_rows(logits, packed, indices, width)
        return {}
    words = packed[:, : -(-width // 32)].view(np.uint32)  # bitwise_count counts |x| if signed
    if width % 32:  # ``packed`` is a copy (rows picked by index); bits past width unused
        words[:, -1] &= (1 << (width % 32)) - 1  # no bit past the vocabulary
    kept = np.bitwise_count(words).sum(axis=1)
    counts = dict(zip(indices, kept.tolist(), strict=True))
    kinds = np.where(3 * (width - kept) < width, 0, np.where(64 * kept <= width, 1, 2))
    if logits.dtype is torch.float64:  # xgrammar's kernel takes 32- and 16-bit floats
        kinds[kinds == 0] = 2
    rows_of = np.asarray(indices)
    few = np.flatnonzero(kinds == 0)
    if len(few):  # few tokens forbidden (prose): xgrammar's kernel writes only those
        xgr.apply_token_bitmask_inplace(logits, bitmask, indices=rows_of[few].tolist())
    sparse = np.flatnonzero(kinds == 1)
    if len(sparse):  # few kept: save them, fill the rows, put them back
        # The few words that hold a kept bit, and their bits (``words`` has no bit past width).
        holding = words[sparse]
        at, word = np.nonzero(holding)
        bits = np.unpackbits(holding[at, word].view(np.uint8)[:, None], axis=-1,
                             bitorder="little").reshape(len(at), 32)
        which, bit = np.nonzero(bits)
        rows = torch.from_numpy(rows_of[sparse][at[which]])
        columns = torch.from_numpy(word[which] * 32 + bit)
        keep_only(logits, torch.from_numpy(rows_of[sparse]), rows, columns, width=width)
    middle = np.flatnonzero(kinds == 2)
    if len(middle):
        _select_rows(logits, packed[middle], rows_of[middle].tolist(), width)
    return counts


def _select_rows(logits: torch.Tensor, packed: np.ndarray, indices: list[int], width: int) -> None:
    """``_select`` the bits of ``packed`` (a row per index) into those rows of ``logits``."""
    bits = np.unpackbits(packed.view(np.uint8), axis=-1, bitorder="little")[:, :width]
    if indices == list(range(logits.shape[0])):
        _select(logits[:, :width], bits)
    else:  # each row in place: an indexed read and write back cost three times more
        for k, i in enumerate(indices):
            _select(logits[i, :width], bits[k])


_NEG = float("-inf")


def keep_only(
    logits: torch.Tensor,
    rows: torch.Tensor | int,
    r: torch.Tensor | int,
    c: torch.Tensor,
    *,
    width: int | None = None,
) -> None:
    """Keep only the entries (``r``, ``c``) of ``rows``: the rest of those rows becomes -inf.

    In place; ``width``: only the first ``width`` ids of each row are filled (``None``: all). A
    mask that allows few tokens, written as two small indexed writes and one fill.
    """
    saved = logits[r, c]
    if logits.device.type == "cpu" and isinstance(rows, torch.Tensor):
        for row in rows.tolist():  # a fill per row: an indexed fill costs three times more
            logits[row, :width].fill_(_NEG)
    else:
        logits[rows, :width] = _NEG
    logits[r, c] = saved

_BITS = {
    torch.float32: (torch.int32, np.int32), torch.float64: (torch.int64, np.int64),
    torch.float16: (torch.int16, np.int16), torch.bfloat16: (torch.int16, np.int16),
}
"""The integer types (torch's, numpy's) as wide as each float type."""


def _select(logits: torch.Tensor, keep: np.ndarray) -> None:
    """Set ``logits`` (a CPU view) to -inf where ``keep`` (0/1 bytes, same shape) is 0, in place.

    On the floats' bits, without a branch: ``((x ^ NEG) & m) ^ NEG`` with ``m`` all ones where a
    token is kept and zero where not. A blend or masked fill branches per element and costs ten
    times more on a CPU where the allowed tokens are scattered over the ids (6 ms against 0.6 for
    32 rows of SmolLM2's vocabulary, float32).
    """
    ints, np_ints = _BITS[logits.dtype]
    ones = torch.from_numpy(np.negative(keep.view(np.int8)).astype(np_ints))  # 1 -> all ones
    neg = int(torch.tensor(float("-inf"), dtype=logits.dtype).view(ints))
    logits.view(ints).bitwise_xor_(neg).bitwise_and_(ones).bitwise_xor_(neg)


def _apply_guards(
    logits: torch.Tensor, guarded: Sequence[tuple[int, QuoteGuard]]
) -> list[tuple[int, GrammarViolationError]]:
    """Apply every row's quote mask in two indexed writes; the rows left with no token.

    A mask that allows few tokens saves them, fills its row and puts them back; one that
    denies some sets them. Whether any row was emptied is read once for all of them.
    """
    device = logits.device
    masks = [(i, guard.mask()) for i, guard in guarded]
    for allow in (False, True):
        picked = [(i, mask.ids) for i, mask in masks if mask.allow is allow and (allow or mask.ids)]
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
    rows = torch.tensor([i for i, _ in guarded], device=device)
    alive = torch.isfinite(logits[rows]).any(dim=-1).tolist()  # one read for every row
    return [
        (i, GrammarViolationError(
            "no token satisfies both the citation grammar and the verbatim quote here; "
            f"answer state {guard.state[0]!r}"
        ))
        for (i, guard), live in zip(guarded, alive, strict=True) if not live
    ]
