"""A tiny byte-level BPE tokenizer built in memory, for unit tests of the generation layer.

Its merges make ``" ["``, ``"]["``, ``"]."`` and a few words single tokens, as in GPT-2 and
Llama 3, so that a marker boundary is not always a token boundary.
"""

from __future__ import annotations

from typing import Any

MERGED = [" [", "][", "].", "10", " the", " is", "Paris", " France", " capital"]


def tiny_tokenizer() -> Any:
    """A ``PreTrainedTokenizerFast`` of about 270 tokens with an end-of-sequence token."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {char: index for index, char in enumerate(sorted(alphabet))}
    merges: list[tuple[str, str]] = []
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False)
    for word in MERGED:
        ((encoded, _),) = byte_level.pre_tokenize_str(word)
        current = encoded[0]
        for char in encoded[1:]:
            merges.append((current, char))
            current += char
            vocab.setdefault(current, len(vocab))
    vocab["<eos>"] = len(vocab)
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<eos>")
