"""llama.cpp's own GBNF parser, reached through llama-cpp-python.

``LlamaGrammar.from_string`` only stores the text in llama-cpp-python 0.3.x; llama.cpp parses it
when the grammar sampler is made (``llama_sampler_init_grammar``), which returns NULL on a grammar
it rejects, and the server adds that sampler without checking (``llama_cpp/_internals.py``
``LlamaSampler.add_grammar``). So a grammar is checked here the way the server will use it.
"""

from __future__ import annotations

import functools
from typing import Any

from citeformer.default_model import gguf_path


@functools.lru_cache(maxsize=1)
def _vocab() -> tuple[Any, Any]:
    import llama_cpp

    llama = llama_cpp.Llama(model_path=str(gguf_path()), vocab_only=True, verbose=False)
    return llama, llama._model.vocab


def parse_gbnf(grammar: str) -> None:
    """Raise ``ValueError`` if llama.cpp's GBNF parser rejects ``grammar`` (root rule ``root``)."""
    import llama_cpp

    # LlamaGrammar is what the server builds from the request's "grammar" field.
    parsed = llama_cpp.LlamaGrammar.from_string(grammar, verbose=False)
    _, vocab = _vocab()
    sampler = llama_cpp.llama_sampler_init_grammar(
        vocab, parsed._grammar.encode("utf-8"), parsed._root.encode("utf-8")
    )
    if not sampler:
        raise ValueError(f"llama.cpp's GBNF parser rejected the grammar:\n{grammar[:2000]}")
    llama_cpp.llama_sampler_free(sampler)
