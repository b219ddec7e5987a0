"""A steered request's state, and what each step does with the rows of the steered requests.

At a step, each steered request's steering is taken once prepared, advanced through the answer
written so far and applied to its row; until then its row keeps to its grammar's check (or, before
that, is waited for at most ``WAIT_S``). A request whose steering fails is ended. How and why:
``citeformer.vllm``'s docstring.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

import torch
import xgrammar as xgr

from citeformer.decoding.steering import RowSteering, Steering, advance_all, keep_only
from citeformer.decoding.vocab import Vocabulary

__all__ = ["CANDIDATES", "MORE_CANDIDATES", "SHORT_CHARS", "WAIT_S", "SteeredAnswer", "SteeredRows"]

logger = logging.getLogger(__name__)

WAIT_S = 0.02
"""Longest one step waits, for all its rows together, for requests whose grammar has not even
its check compiled yet (see ``citeformer.vllm``'s docstring)."""
CANDIDATES = 64
"""Likeliest tokens of a request's row checked against its grammar while its steering is being
prepared."""
MORE_CANDIDATES = 1024
"""Tokens checked where none of the ``CANDIDATES`` nor of the short tokens fits (about 5 us
each)."""
SHORT_CHARS = 3
"""Longest token (in bytes) of spaces, digits and punctuation checked where none of the
``CANDIDATES`` fits: what a grammar asks for at a marker or a sentence's end."""

_NEG = float("-inf")


@dataclass
class SteeredAnswer:
    """One steered request: its steering once prepared, and how far it has read its output."""

    steering: Future[RowSteering]
    """The request's steering, prepared in the processor's thread pool."""
    check: Future[xgr.GrammarMatcher]
    """Its grammar without a vocabulary (characters), ready long before ``steering``."""
    output_ids: Sequence[int] | None = None
    """Model Runner V1: the request's running output list (vLLM appends to it)."""
    prompt_len: int = 0
    """Model Runner V2: the prompt's length in the slot's row of token ids."""
    written: list[int] = field(default_factory=list)
    """The output tokens read so far."""
    steered: RowSteering | None = None
    """``steering``'s result once taken (it then steers every step)."""
    fed: int = 0
    """Output tokens already advanced into ``steered``."""
    checked: int = 0
    """Output tokens already accepted by ``check``."""
    failed: bool = False
    """Its steering raised: the answer is being ended."""
    left: bool = False
    """Left to vLLM's markers' grammar: its answer so far is not one the steering can take."""
    caught_up: bool = False
    """``steered`` has taken the answer written before it was ready."""


class SteeredRows:
    """What ``SteeringProcessor.apply`` does, at each step, with the rows of the steered requests.

    Engine-neutral: the processor reads each request's new output tokens (the way its model runner
    gives them) and hands over ``(row, answer)`` pairs; the steering core, the vocabulary and the
    end-of-answer ids are the processor's.
    """

    def __init__(self, steering: Steering, vocab: Vocabulary, stop_ids: list[int]) -> None:
        self._steering = steering
        self._vocab = vocab
        self._stop_ids = stop_ids
        self._short: torch.Tensor | None = None

    def steer(self, logits: torch.Tensor, pending: list[tuple[int, SteeredAnswer]]) -> None:
        """Steer, restrict to their check, or end the ``pending`` rows of ``logits`` in place."""
        self._wait_for_checks(pending)
        # What a failed row ends with: its end-of-answer tokens as vLLM gave them (one
        # gather for the batch; the quote guard may leave a row nothing else to read).
        stops = logits[:, self._stop_ids]
        for _, answer in pending:
            self._take(answer)
        self._advance_together([answer for _, answer in pending])
        steered, checked = [], []
        for row, answer in pending:
            if not self._advance(answer):
                continue
            if answer.steered is not None:
                steered.append((row, answer))
            elif answer.check.done():
                checked.append((row, answer))
        answers = dict(steered)
        self._steering.apply(
            logits, [(row, answer.steered) for row, answer in steered],  # type: ignore[misc]
            on_error=lambda row, error: self._fail(answers[row], error),
        )
        if checked:
            self._restrict(logits, checked)
        for row, answer in pending:
            if answer.failed:
                self._end(logits, row, stops[row], answer)

    def _wait_for_checks(self, pending: list[tuple[int, SteeredAnswer]]) -> None:
        """Wait, ``WAIT_S`` at most in all, for the checks not yet compiled."""
        deadline = time.monotonic() + WAIT_S
        for _, answer in pending:
            if answer.left or answer.check.done():
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            try:
                answer.check.exception(timeout=remaining)
            except TimeoutError:
                return

    def _take(self, answer: SteeredAnswer) -> None:
        """Start steering with the request's steering once it is prepared."""
        if answer.steered is not None or answer.failed or not answer.steering.done():
            return
        if answer.steering.exception() is not None:
            # The payload was checked at admission: only an engine-side failure gets here.
            if not answer.left:
                logger.error("citeformer steering: a request's steering could not be prepared; "
                             "it is left to vLLM's markers' grammar: %r",
                             answer.steering.exception())
            answer.left = True
        elif not answer.left:
            answer.steered = answer.steering.result()

    def _advance_together(self, answers: list[SteeredAnswer]) -> None:
        """Advance the steered rows that wrote one token since the last step, in one call.

        Their grammars accept their tokens together (``advance_all``); the rest (a request
        catching up, or one written several tokens) goes through ``_advance`` alone.
        """
        ready = [
            answer for answer in answers
            if answer.steered is not None and answer.caught_up and not answer.failed
            and not answer.left and len(answer.written) == answer.fed + 1
        ]
        if not ready:
            return
        advance_all(
            [answer.steered for answer in ready],  # type: ignore[misc]
            [answer.written[answer.fed] for answer in ready],
            on_error=lambda k, error: self._fail(ready[k], error),
        )
        for answer in ready:
            answer.fed += 1

    def _advance(self, answer: SteeredAnswer) -> bool:
        """Advance the steering (or, before it, the check) past the new tokens.

        ``False`` where the row is not touched this step.
        """
        if answer.failed or answer.left:
            return False
        if answer.steered is not None:
            try:
                for token in answer.written[answer.fed:]:
                    answer.steered.advance(token)
                    answer.fed += 1
            except Exception as error:
                if answer.caught_up:
                    self._fail(answer, error)
                else:  # what it cannot take was written before it was ready
                    self._leave(answer, error)
                return False
            answer.caught_up = True
            return True
        if not answer.check.done():
            return False
        try:
            check = answer.check.result()
        except Exception as error:
            self._leave(answer, error)
            return False
        for token in answer.written[answer.checked:]:
            if not check.accept_string(self._vocab.token_bytes[token]):
                self._leave(answer, ValueError(f"token {token} breaks the request's grammar"))
                return False
            answer.checked += 1
        return True

    def _restrict(self, logits: torch.Tensor, rows: list[tuple[int, SteeredAnswer]]) -> None:
        """Keep, in each row, only the likeliest tokens its grammar's check accepts."""
        index = torch.tensor([row for row, _ in rows], device=logits.device)
        picked = logits[index]
        top = picked.topk(min(CANDIDATES, picked.shape[-1]), dim=-1)
        ids, values = top.indices.tolist(), top.values.tolist()
        for k, (row, answer) in enumerate(rows):
            check = answer.check.result()
            kept = self._accepted(check, ids[k], values[k])
            if not kept:  # the grammar wants a marker or a sentence's end: a short token
                short = self._short_tokens(logits.device)
                scores = logits[row, short]
                order = scores.argsort(descending=True)
                kept = self._accepted(check, short[order].tolist(), scores[order].tolist())
            if not kept:
                more = logits[row].topk(min(MORE_CANDIDATES, logits.shape[-1]))
                kept = self._accepted(check, more.indices.tolist(), more.values.tolist())
            if not kept:
                self._fail(answer, ValueError(
                    f"none of the {MORE_CANDIDATES} likeliest tokens fits the request's grammar "
                    "while its steering is prepared"))
                continue
            keep_only(logits, row, row, torch.tensor(kept, device=logits.device))

    def _accepted(
        self, check: xgr.GrammarMatcher, ids: list[int], values: list[float]
    ) -> list[int]:
        """Those of ``ids`` (by falling ``values``) the check accepts next; it is left as it was."""
        kept = []
        ending = check.is_terminated()
        stops = set(self._stop_ids)
        for token, value in zip(ids, values, strict=True):
            if value == _NEG:
                break  # sorted: the rest is masked too
            if token in stops:
                if ending:
                    kept.append(token)
                continue
            raw = self._vocab.token_bytes[token]
            if raw and check.accept_string(raw):
                check.rollback(1)
                kept.append(token)
        return kept

    def _short_tokens(self, device: torch.device) -> torch.Tensor:
        """The ids of the tokens of at most ``SHORT_CHARS`` spaces, digits and punctuation."""
        if self._short is None:
            self._short = torch.tensor([
                token for token, raw in enumerate(self._vocab.token_bytes)
                if raw and len(raw) <= SHORT_CHARS and not any(chr(b).isalpha() for b in raw)
            ], dtype=torch.long)
        return self._short.to(device)

    def _leave(self, answer: SteeredAnswer, error: Exception) -> None:
        logger.warning("citeformer steering: a request is left to vLLM's markers' grammar, its "
                       "answer written before its steering was ready: %r", error)
        answer.left = True
        answer.steered = None

    def _fail(self, answer: SteeredAnswer, error: Exception) -> None:
        if not answer.failed:
            logger.error("citeformer steering failed for a request; it is ended: %r", error)
        answer.failed = True

    def _end(
        self, logits: torch.Tensor, row: int, stops: torch.Tensor, answer: SteeredAnswer
    ) -> None:
        """End a request whose steering failed.

        Only the end-of-answer tokens are left, as vLLM's own grammar scored them (``stops``,
        read before the steering). Where that grammar does not let the answer end here, the row
        is left as it is: a failure before the steering leaves it as vLLM gave it, one in a
        lever has its edits rolled back, both under the request's grammar; only a quote guard
        that left nothing has the row refilled, evenly, from the request's grammar. The client
        rechecks what was written either way.
        """
        if torch.isfinite(stops).any():
            logits[row] = _NEG
            logits[row, self._stop_ids] = stops
            return
        if torch.isfinite(logits[row]).any():
            return
        matcher = None if answer.steered is None else answer.steered.matcher
        if matcher is None:
            return
        mask = xgr.allocate_token_bitmask(1, logits.shape[-1])
        matcher.fill_next_token_bitmask(mask)
        row_logits = torch.zeros(1, logits.shape[-1], device=logits.device)
        xgr.apply_token_bitmask_inplace(row_logits, mask.to(logits.device))
        logits[row] = row_logits[0]
