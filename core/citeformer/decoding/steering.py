"""The steering core: the grammar's mask, the quote guard and the levers over a batch of logits.

Engine-neutral: it takes a batch of logits rows (a torch tensor, ``[rows, vocab]``) and, per
answer, a ``RowSteering`` that is told each token the engine generated (``advance``). It knows
nothing of an engine's call convention; ``citeformer.decoding.hf`` plugs it into transformers'
``generate``, ``citeformer.vllm`` into vLLM's logits processors, ``citeformer.llama_cpp`` into
llama-cpp-python's ``logits_processor`` hook.

At each step, for the rows given: the model's own scores are kept for the levers that read them
(``Lever.needs_raw``); the rows' grammar matchers fill one bitmask in one call and it is applied
once; then each row's quote guard removes what would break a quote, and its levers act in order.
A row whose engine already masks the grammar (a server's structured outputs) has no matcher here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import xgrammar as xgr

from citeformer.decoding.levers import AnswerState, Lever, levers_for
from citeformer.decoding.quote_guard import QuoteGuard
from citeformer.decoding.vocab import Vocabulary
from citeformer.errors import GrammarViolationError
from citeformer.request import GenerationRequest

__all__ = ["RowSteering", "Steering", "accept_token", "steering_for"]


def accept_token(matcher: xgr.GrammarMatcher, token_id: int) -> None:
    """Advance ``matcher`` by one generated token, or raise if its grammar forbids the token."""
    if not matcher.accept_token(token_id):
        raise GrammarViolationError(
            f"token {token_id} was generated but the citation grammar forbids it here; "
            "the logits were not masked with this answer's grammar"
        )


class RowSteering:
    """What steers one answer: its grammar matcher, quote guard and levers, and its state.

    ``matcher``: ``None`` where the engine masks the grammar itself. ``advance`` each generated
    token (never a stop token: the answer is over then) before the next step's logits.
    """

    def __init__(
        self,
        vocab: Vocabulary,
        *,
        matcher: xgr.GrammarMatcher | None = None,
        guard: QuoteGuard | None = None,
        levers: Sequence[Lever] = (),
    ) -> None:
        self.state = AnswerState(vocab.token_bytes)
        """The answer so far, shared by every lever of the row."""
        self.matcher = matcher
        self.guard = guard
        self.levers = tuple(levers)
        self.needs_raw = any(lever.needs_raw for lever in self.levers)
        """Whether a lever reads the model's scores from before the masks."""

    def advance(self, token_id: int) -> None:
        """Move past one generated token, or raise if the grammar or a quote forbids it."""
        if self.matcher is not None:
            accept_token(self.matcher, token_id)
        if self.guard is not None:
            self.guard.advance(token_id)
        self.state.append(token_id)

    def steer(self, logits: torch.Tensor, raw: torch.Tensor | None) -> None:
        """The quote guard's mask, then every lever, on this row's logits (``[1, vocab]``)."""
        if self.guard is not None:
            _apply_guard(self.guard, logits)
        for lever in self.levers:
            lever.apply(self.state, logits, raw)


def steering_for(
    request: GenerationRequest,
    vocab: Vocabulary,
    stop_ids: Sequence[int],
    *,
    matcher: xgr.GrammarMatcher | None,
) -> RowSteering:
    """The steering of one constrained request: its quote guard, levers and the given matcher.

    The same on every engine: ``matcher`` is the request's grammar compiled for the engine's
    vocabulary (``None`` where the engine masks the grammar itself), ``stop_ids`` the ids that
    end an answer there. Evidence left to the generator is lexical.
    """
    guard = None
    if request.quotable_chars is not None:
        guard = QuoteGuard(
            request.sources, vocab.sorted,
            min_quote_chars=request.grammar.min_quote_chars,
            quotable_chars=request.quotable_chars,
        )
    return RowSteering(
        vocab, matcher=matcher, guard=guard,
        levers=levers_for(request, vocab, stop_ids, request.default_evidence),
    )


class Steering:
    """Steers the rows of a batch of logits; one per decoding loop (it holds the bitmask)."""

    def __init__(self, vocab_size: int) -> None:
        self._vocab_size = vocab_size
        self._bitmask: torch.Tensor | None = None
        self._filler = xgr.BatchGrammarMatcher()

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
        raw = {i: logits[i : i + 1].detach().clone() for i, row in rows if row.needs_raw}
        grammars = [(i, row.matcher) for i, row in rows if row.matcher is not None]
        if grammars:
            indices = [i for i, _ in grammars]
            bitmask = self._bitmask_for(logits.shape[0])
            # One call fills every row (on several threads where the machine has them).
            self._filler.batch_fill_next_token_bitmask(
                [matcher for _, matcher in grammars], bitmask, indices=indices
            )
            xgr.apply_token_bitmask_inplace(logits, bitmask.to(logits.device), indices=indices)
        for i, row in rows:
            if on_error is None:
                row.steer(logits[i : i + 1], raw.get(i))
                continue
            try:
                row.steer(logits[i : i + 1], raw.get(i))
            except Exception as error:  # noqa: BLE001 - reported, the batch goes on
                on_error(i, error)

    def _bitmask_for(self, rows: int) -> torch.Tensor:
        if self._bitmask is None or self._bitmask.shape[0] < rows:
            self._bitmask = xgr.allocate_token_bitmask(rows, self._vocab_size)
        return self._bitmask


def _apply_guard(guard: QuoteGuard, logits: torch.Tensor) -> None:
    mask = guard.mask()
    ids = torch.tensor(mask.ids, dtype=torch.long, device=logits.device)
    if mask.allow:
        removed = torch.ones(logits.shape[-1], dtype=torch.bool, device=logits.device)
        removed[ids] = False
        logits.masked_fill_(removed, float("-inf"))
    elif len(mask.ids):
        logits[:, ids] = float("-inf")
    if not torch.isfinite(logits).any():
        raise GrammarViolationError(
            "no token satisfies both the citation grammar and the verbatim quote here; "
            f"answer state {guard.state[0]!r}"
        )
