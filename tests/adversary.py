"""The adversary of the guarantee tests: a tiny random-weight Llama that craves markers."""

from __future__ import annotations

import re

import torch


def bracket_hungry_llama(tokenizer: object, quote_boost: float = 0.0) -> torch.nn.Module:
    """A tiny random Llama whose logits push tokens holding "[" up by 8, digits or "]" by 3,
    and tokens holding a double quote by ``quote_boost``."""
    from transformers import LlamaConfig, LlamaForCausalLM

    class BracketHungryLlama(LlamaForCausalLM):
        def forward(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            output = super().forward(*args, **kwargs)
            output.logits = output.logits + self.boost
            return output

    vocab = tokenizer.get_vocab()  # type: ignore[attr-defined]
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,  # type: ignore[arg-type]
        num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
        max_position_embeddings=4096, eos_token_id=tokenizer.eos_token_id,  # type: ignore[attr-defined]
    )
    torch.manual_seed(0)
    model = BracketHungryLlama(config).eval()
    boost = torch.zeros(config.vocab_size)
    for token, token_id in vocab.items():
        if re.search(r"[\[\]0-9]", token):
            boost[token_id] = 8.0 if "[" in token else 3.0
        if '"' in token:
            boost[token_id] += quote_boost
    model.register_buffer("boost", boost)
    return model
