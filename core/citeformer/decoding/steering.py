"""The steering core: the grammar's mask, the quote guard and the levers over a batch of logits.

Engine-neutral: it takes a batch of logits rows (a torch tensor, ``[rows, vocab]``) and, per
answer, a ``RowSteering`` that is told each token the engine generated (``advance``). It knows
nothing of an engine's call convention; ``citeformer.decoding.hf`` plugs it into transformers'
``generate``, ``citeformer.vllm`` into vLLM's logits processors, ``citeformer.llama_cpp`` into
llama-cpp-python's ``logits_processor`` hook.

A step is two parts. ``Steering.prepare`` needs no logits, so an engine may run it while the
model computes them (``citeformer.decoding.hf``): the rows' grammar matchers fill one bitmask in
one call (on one thread beside a model on the host), each row's ``WordBound`` clears in it what
its bounds forbid, how each row's mask is to be written is planned
(``citeformer.decoding.masks``), each row's quote guard says its mask, which of the ids the
levers read the masks will allow is read from both, and the levers that read no scores say what
they change (made ahead, a prose row's removals join its mask's own write: ``MaskPlan.forbid``).
``Steering.apply``, on the logits' device: what the model's own scores put on ending and citing is
read once for the rows whose levers need it (``Lever.needs_raw``), before any mask; the bitmask
and the quote masks are written; then the remaining levers say what they change. Host logits are
read and written through one numpy view of their memory (``host_view``). Levers act lever by
lever across the rows (a ``Lever.batched`` class for all its rows in one call, one removal entry
per id array they share), each reading only its row's ``AnswerState`` (whose work per token does
not grow with the answer), and ``StepEdits`` makes the changes of all rows in a few indexed
writes, each row's in the order of its levers. No step copies the logits to the host. The rows'
tokens are accepted by their matchers in one call (``advance_all``). A row whose engine already
masks the grammar (a server's structured outputs) has no matcher here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
import xgrammar as xgr

from citeformer.decoding.edits import HOST_FLOATS, StepEdits, Wanted, WantedReader, host_view
from citeformer.decoding.levers import AnswerState, Lever, levers_for
from citeformer.decoding.masks import MaskPlan, apply_guards, keep_only
from citeformer.decoding.quote_guard import Mask, QuoteGuard
from citeformer.decoding.vocab import Vocabulary
from citeformer.decoding.word_bound import (
    WordBound,
    bounds_words,
    counts_words,
    word_bound_for,
)
from citeformer.errors import GrammarViolationError, InvalidInputError
from citeformer.request import GenerationRequest

__all__ = [
    "RowSteering", "StepMasks", "Steering", "accept_token", "advance_all", "keep_only",
    "local_grammar", "steering_for",
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


_CPU = torch.device("cpu")

_BATCHED_FROM = 4
"""The fewest rows a ``batched`` lever class steers in one call; fewer cost less row by row."""


def _edit_all(
    edits: StepEdits,
    rows: Sequence[tuple[int, RowSteering]],
    on_error: Callable[[int, Exception], None] | None,
    *,
    raw: bool | None = None,
) -> None:
    """Every row's levers ask ``edits`` for their changes, lever by lever across the rows.

    Rows alike in their levers' classes (``RowSteering.kinds``) take each lever together: a
    ``batched`` class in one call for all of them, any other row by row. Each row's levers still
    act in its own order (``StepEdits.position``). A row whose lever raises is told to
    ``on_error`` (without it the error propagates), its edits are forgotten and its later levers
    not asked. ``raw``: only the levers whose ``needs_raw`` is that (``None``: all of them).
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
            if raw is not None and kind.needs_raw is not raw:
                continue
            edits.position = position
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
        self._fillers: dict[int, xgr.BatchGrammarMatcher] = {}
        self._readers: dict[tuple[int, torch.device], WantedReader] = {}
        self._on_host = True
        """Whether the last logits steered were on the host (how ``prepare`` plans the mask)."""
        self._dtype = torch.float32
        """The last logits' dtype: the one ``prepare`` plans the mask for."""
        self._device = _CPU
        """The last logits' device: the one ``prepare``'s reader is for."""
        self._guard_flags: dict[int, tuple[Mask, np.ndarray]] = {}

    def prepare(
        self, rows: Sequence[tuple[int, RowSteering]], *, ahead: bool = True
    ) -> StepMasks:
        """What ``rows`` will be steered by at the coming step that does not read its logits.

        The rows' grammar bitmask, filled in one call and bounded by each row's ``WordBound``,
        how each row is to be masked, each quote guard's mask, and the edits of the levers that
        read no scores (``Lever.needs_raw``). An engine that knows the rows' tokens before the
        model has computed the next logits makes these meanwhile (``citeformer.decoding.hf``)
        and hands them to ``apply``; called after the rows' ``advance``, before the logits are
        steered. ``ahead``: made while the model computes the logits, where more work here that
        saves some in ``apply`` is free (``MaskPlan``); ``False`` where the step waits for it.
        """
        grammars = [(i, row.matcher) for i, row in rows if row.matcher is not None]
        plan, closed, words = None, frozenset[int](), None
        if grammars:
            indices = [i for i, _ in grammars]
            bitmask = self._bitmask_for(max(indices) + 1)
            if len(grammars) > 1:  # one call fills every row
                self._filler().batch_fill_next_token_bitmask(
                    [matcher for _, matcher in grammars], bitmask, indices=indices
                )
            else:  # one row's fill cannot be split: the pool cost 2.6 ms a step on two threads
                grammars[0][1].fill_next_token_bitmask(bitmask, indices[0])
            words = bitmask.numpy()  # the same memory: xgrammar's bitmask lives on the host
            for i, row in rows:
                if row.word_bound is not None:
                    row.word_bound.restrict(words[i])
            plan = MaskPlan(
                bitmask, indices, self._vocab_size, host=self._on_host, dtype=self._dtype,
                ahead=ahead,
            )
            closed = self._closed(words, indices, rows[0][1].vocab)
        guards = [(i, row.guard, row.guard.mask()) for i, row in rows if row.guard is not None]
        # A row whose grammar allows no marker opener here has levers with nothing to read.
        reading = [i for i, row in rows if row.needs_raw and i not in closed]
        allowed = self._allowed(rows[0][1].vocab, words, reading, guards) if reading else None
        # The levers that read no scores say their edits now; a row's error waits for ``apply``,
        # where a row its quote guard fails is not steered by its levers.
        edits, errors = StepEdits(), []
        _edit_all(edits, rows, lambda i, error: errors.append((i, error)), raw=False)
        if plan is not None and plan.listed:  # their removals join the mask's own write
            guarded = {i for i, _, _ in guards}
            listed = [i for i in plan.listed if i not in guarded]
            edits.drop_removals(plan.forbid(edits.removals_of(listed)))
        return StepMasks([i for i, _ in rows], plan, guards, edits, errors, closed, reading,
                         allowed)

    def apply(
        self,
        logits: torch.Tensor,
        rows: Sequence[tuple[int, RowSteering]],
        *,
        on_error: Callable[[int, Exception], None] | None = None,
        masks: StepMasks | None = None,
    ) -> None:
        """Steer ``logits`` in place: ``rows`` pairs a row index of ``logits`` with its steering.

        Rows left out are untouched. ``on_error``: where a row's guard or levers raise, it is
        told (row index, error) and the other rows are steered still; without it, the error
        propagates. ``masks``: the rows' ``prepare``, made since their last ``advance`` (made
        here where not given).
        """
        if not rows:
            return
        host = host_view(logits)  # one torch call tells the device and the type
        if host is not None:
            self._on_host, self._dtype, self._device = True, HOST_FLOATS[host.dtype], _CPU
        else:
            self._on_host = logits.device.type == "cpu"
            self._dtype, self._device = logits.dtype, logits.device
        if masks is None:
            masks = self.prepare(rows, ahead=False)
        elif masks.rows != [i for i, _ in rows]:
            raise InvalidInputError(
                f"the masks were prepared for rows {masks.rows} but rows "
                f"{[i for i, _ in rows]} are steered; prepare them for the rows steered"
            )
        wanted: dict[int, Wanted] = {}
        if masks.reading and masks.reader_allowed is not None:  # before any mask
            steered = dict(rows)
            wanted = self._reader(rows[0][1].vocab).read(
                logits, masks.reading, masks.reader_allowed,
                shares=lambda i: steered[i].shares(), may_share=lambda i: steered[i].may_share(),
                host=host,
            )
        allowed = masks.plan.apply(logits, host=host) if masks.plan is not None else {}
        failed: set[int] = set()
        if masks.guards:
            for i, _, _ in masks.guards:
                allowed.pop(i, None)  # the guard removes more
            for i, error in apply_guards(logits, masks.guards):
                if on_error is None:
                    raise error
                on_error(i, error)
                failed.add(i)
        for i, lever_error in masks.errors:  # the levers that read no scores, in ``prepare``
            if i not in failed:
                if on_error is None:
                    raise lever_error
                on_error(i, lever_error)
                failed.add(i)
        edits = StepEdits(wanted, allowed)
        edits.take(masks.edits)
        for i in failed:
            edits.forget(i)
        _edit_all(edits, [(i, row) for i, row in rows if i not in failed], on_error, raw=True)
        edits.apply(logits, host=host)

    def _reader(self, vocab: Vocabulary) -> WantedReader:
        """The ``WantedReader`` of the vocabulary's enders, openers and chainers, built once.

        One per device: the last logits'.
        """
        key = (id(vocab), self._device)
        if key not in self._readers:
            self._readers[key] = WantedReader(
                vocab.enders, vocab.openers, self._device, chainers=vocab.chainers
            )
        return self._readers[key]

    def _allowed(
        self,
        vocab: Vocabulary,
        words: np.ndarray | None,
        reading: list[int],
        guards: list[tuple[int, QuoteGuard, Mask]],
    ) -> np.ndarray:
        """Which of the reader's ids the masks will allow in each of the ``reading`` rows.

        From the bitmask's ``words`` (every id where the rows have none) and the quote guards'
        masks: read before the logits, so ``apply`` reads the scores once, before the masks.
        """
        allowed = self._reader(vocab).allowed(
            words, reading if words is not None else range(len(reading))
        )
        if guards:
            at = {i: k for k, i in enumerate(reading)}
            for i, _, mask in guards:
                if i in at:
                    allowed[at[i]] &= self._guard_allows(vocab, mask)
        return allowed

    def _guard_allows(self, vocab: Vocabulary, mask: Mask) -> np.ndarray:
        """Which of the reader's ids a quote guard's ``mask`` allows.

        Kept per mask: outside a quote a guard hands back the same few masks step after step.
        """
        found = self._guard_flags.get(id(mask))
        if found is None or found[0] is not mask:
            if len(self._guard_flags) >= 256:  # bounded: the masks of the rows still steered
                self._guard_flags.clear()
            listed = np.isin(self._reader(vocab).ids, np.asarray(mask.ids, dtype=np.int64))
            found = self._guard_flags[id(mask)] = (mask, listed if mask.allow else ~listed)
        return found[1]

    @staticmethod
    def _closed(words: np.ndarray, indices: list[int], vocab: Vocabulary) -> frozenset[int]:
        """The rows among ``indices`` whose bitmask ``words`` allows no marker opener."""
        at, bit = vocab.opener_bits
        opens = ((words[indices][:, at] >> bit) & 1).any(axis=1).tolist()
        return frozenset(i for i, may in zip(indices, opens, strict=True) if not may)

    def _filler(self) -> xgr.BatchGrammarMatcher:
        """What fills several rows' masks at once: on one thread where the model runs on the host.

        There torch's threads have just computed the logits and still hold the cores (OpenMP's
        threads wait spinning): a pool of two took 2.7 ms to fill 32 rows beside them, one
        thread 0.4 (benchmarks/README.md, "One thread fills the masks beside a host model").
        Beside an accelerator's model, as many threads as torch computes with.
        """
        threads = 1 if self._on_host else max(1, torch.get_num_threads())
        filler = self._fillers.get(threads)
        if filler is None:
            filler = self._fillers[threads] = xgr.BatchGrammarMatcher(threads)
        return filler

    def _bitmask_for(self, rows: int) -> torch.Tensor:
        if self._bitmask is None or self._bitmask.shape[0] < rows:
            self._bitmask = xgr.allocate_token_bitmask(rows, self._vocab_size)
        return self._bitmask


@dataclass(frozen=True)
class StepMasks:
    """One step's steering made before its logits (``Steering.prepare``): none of it reads them."""

    rows: list[int]
    """The logits rows they were made for, in order."""
    plan: MaskPlan | None
    """How the grammar's bitmask is written into the rows that have a matcher."""
    guards: list[tuple[int, QuoteGuard, Mask]]
    """(row, guard, its mask) of each row with a quote guard."""
    edits: StepEdits
    """The edits of the levers that read no scores (``Lever.needs_raw`` false)."""
    errors: list[tuple[int, Exception]]
    """(row, error) of each row where one of those levers raised."""
    closed: frozenset[int] = frozenset()
    """The rows whose grammar mask allows no marker opener: their scores are not read, and
    their levers that read them find no ``Wanted`` (``Lever.needs_raw``)."""
    reading: list[int] = field(default_factory=list)
    """The rows whose scores are read (``Lever.needs_raw``, and not ``closed``)."""
    reader_allowed: np.ndarray | None = None
    """Per ``reading`` row, which of the ``WantedReader``'s ids the masks will allow."""
