"""A transformers logits processor that masks every token the compiled citation grammar forbids."""

from __future__ import annotations

import torch
import xgrammar as xgr
from transformers import LogitsProcessor

from citeformer.errors import GrammarViolationError


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
