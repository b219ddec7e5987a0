"""Transformers logits processors: the citation grammar's mask and the verbatim quotes' mask."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import xgrammar as xgr
from transformers import LogitsProcessor

from citeformer.errors import GrammarViolationError
from citeformer.quotes import QuoteGuard


class GrammarLogitsProcessor(LogitsProcessor):
    """Masks logits with an xgrammar matcher; one instance serves one ``generate()`` call.

    Unlike ``xgrammar.contrib.hf.LogitsProcessor`` it raises (also under ``python -O``) when a
    sampled token is rejected, and skips the mask when the grammar allows every token.
    """

    def __init__(self, compiled_grammar: xgr.CompiledGrammar) -> None:
        self._matcher = xgr.GrammarMatcher(compiled_grammar)
        vocab_size = compiled_grammar.tokenizer_info.vocab_size
        self._bitmask = xgr.allocate_token_bitmask(1, vocab_size)
        self._prompt_length: int | None = None

    @property
    def matcher(self) -> xgr.GrammarMatcher:
        return self._matcher

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if input_ids.shape[0] != 1:
            raise ValueError(
                f"GrammarLogitsProcessor handles one sequence at a time, got a batch of "
                f"{input_ids.shape[0]}; generate each answer separately"
            )
        if self._prompt_length is None:
            self._prompt_length = input_ids.shape[1]
        else:
            self.accept(int(input_ids[0, -1]))
        if self._matcher.fill_next_token_bitmask(self._bitmask):
            xgr.apply_token_bitmask_inplace(scores, self._bitmask.to(scores.device))
        return scores

    def accept(self, token_id: int) -> None:
        """Advance the grammar by one generated token, or raise if the grammar forbids it."""
        if not self._matcher.accept_token(token_id):
            raise GrammarViolationError(
                f"token {token_id} was generated but the citation grammar forbids it here; "
                "the logits were not masked (was this processor passed to generate()?)"
            )


class QuoteLogitsProcessor(LogitsProcessor):
    """Keeps every quote verbatim: masks, after the grammar, tokens a ``QuoteGuard`` forbids.

    One instance serves one ``generate()`` call; place it after ``GrammarLogitsProcessor``.
    """

    def __init__(self, guard: QuoteGuard, stop_token_ids: Sequence[int]) -> None:
        self._guard = guard
        self._stop = frozenset(stop_token_ids)
        self._started = False

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self._started:
            token = int(input_ids[0, -1])
            if token not in self._stop:
                self._guard.advance(token)
        self._started = True
        mask = self._guard.mask()
        ids = torch.tensor(mask.ids, dtype=torch.long, device=scores.device)
        if mask.allow:
            removed = torch.ones(scores.shape[-1], dtype=torch.bool, device=scores.device)
            removed[ids] = False
            scores.masked_fill_(removed, float("-inf"))
        elif len(mask.ids):
            scores[:, ids] = float("-inf")
        if not torch.isfinite(scores).any():
            raise GrammarViolationError(
                "no token satisfies both the citation grammar and the verbatim quote here; "
                f"answer state {self._guard.state[0]!r}"
            )
        return scores
