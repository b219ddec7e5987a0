"""Decoding: the model's tokens steered, step by step, inside the citation grammar.

The modules:

```text
engine        DecodingEngine: a request's prepare, run, finish; and TransformersEngine,
              a HuggingFace causal LM's
tokenizer_kit TokenizerKit: a tokenizer's TokenizerInfo, compiled grammars, vocabulary and
              stop ids, shared by the engines and vLLM's processor
batching      which requests decode together (Prepared rows, decoding keys, bad rows)
steering      the steering core: grammar masks, quote guard and levers over a batch of logits,
              in two parts: what reads no logits (prepare) and the rest (apply)
masks         a step's masks written into the logits, the cheapest way per row
answer_state  one answer as the levers read it, kept token by token at a constant cost
levers        the readability and evidence levers, over one answer's state
edits         one step's lever changes over the whole batch, in a few tensor writes
quote_guard   the verbatim quote guard, a byte-level automaton over the answer
vocab         one table of token classes per vocabulary
hf            the steering core as a transformers logits processor, its work ahead of the
              step on an accelerator
precision     the dtype and device a model runs in when the user does not say
hf_imports    transformers' model modules imported without SciPy, which no text model calls
```

The steering core knows no engine: ``hf`` plugs it into transformers' ``generate``,
``citeformer.vllm`` into vLLM and ``citeformer.llama_cpp`` into llama-cpp-python. Names load
on first use, so that an engine's processor importing the steering core loads no transformers.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "AnswerState": "citeformer.decoding.answer_state",
    "DecodingEngine": "citeformer.decoding.engine",
    "Lever": "citeformer.decoding.levers",
    "RowSteering": "citeformer.decoding.steering",
    "Steering": "citeformer.decoding.steering",
    "TokenizerKit": "citeformer.decoding.tokenizer_kit",
    "TransformersEngine": "citeformer.decoding.engine",
    "Vocabulary": "citeformer.decoding.vocab",
    "levers_for": "citeformer.decoding.levers",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'citeformer.decoding' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
