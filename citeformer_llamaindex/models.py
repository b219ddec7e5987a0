"""The user's own LlamaIndex LLM, turned into the citeformer generator that runs it.

A ``HuggingFaceLLM`` (llama-index-llms-huggingface) holds a transformers model and tokenizer in
this process: it becomes a ``CiteGenerator`` over that very model. An ``OpenAILike`` or
``OpenAI`` (llama-index-llms-openai-like, llama-index-llms-openai) whose ``api_base`` is a
llama.cpp, vLLM or SGLang server becomes a ``ServerGenerator`` on that server. Nothing else can
enforce the citation grammar, so anything else is refused, naming what was given and the kinds
accepted.

Kinds are recognised by class, and the optional packages are imported only when the object's own
class (or a base of it) comes from them: importing ``citeformer_llamaindex`` imports none.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from citeformer.errors import InvalidInputError
from citeformer.generation.protocols import AnswerGenerator
from citeformer.integration import (
    packages_of,
    refuse_server_settings,
    server_for_openai_model,
    unsupported_llm,
)

__all__ = ["ACCEPTED_MODELS", "generator_from"]

ACCEPTED_MODELS = (
    "llama_index.llms.huggingface.HuggingFaceLLM",
    "llama_index.llms.openai_like.OpenAILike",
    "llama_index.llms.openai.OpenAI",
)
"""The LLM classes ``llm=`` takes; the OpenAI ones with an ``api_base`` and an ``engine=``."""

_PACKAGES = (
    "llama_index.llms.huggingface", "llama_index.llms.openai_like", "llama_index.llms.openai",
)
_KINDS = (
    "a HuggingFaceLLM (llama-index-llms-huggingface), or an OpenAILike or OpenAI with an "
    "api_base of a llama.cpp, vLLM or SGLang server (llama-index-llms-openai-like)"
)


def generator_from(
    llm: object, *, engine: str | None = None, server_options: Mapping[str, Any] | None = None
) -> AnswerGenerator:
    """The generator that runs ``llm`` under the citation grammar.

    ``engine`` (``"llama.cpp"``, ``"vllm"``, ``"vllm-guided"``, ``"sglang"``) is required for
    an OpenAI-compatible LLM, and refused for one in this process: a URL does not say which
    engine serves it, and each engine reads the grammar from a different request field.
    ``server_options`` are more ``ServerGenerator`` keywords (``timeout``, ``deadline``,
    ``max_retries``, ``headers``, ``context_length``, ``transport``); they win over the values
    read from the LLM.
    """
    packages = packages_of(llm, _PACKAGES)
    if "llama_index.llms.huggingface" in packages:
        from llama_index.llms.huggingface import HuggingFaceLLM

        if isinstance(llm, HuggingFaceLLM):
            refuse_server_settings(
                llm, "OpenAI-compatible LLM (OpenAILike, OpenAI)", engine, server_options
            )
            return _from_huggingface(llm)
    if "llama_index.llms.openai" in packages:
        from llama_index.llms.openai import OpenAI

        if isinstance(llm, OpenAI):  # OpenAILike is one
            return server_for_openai_model(
                type(llm).__name__, llm.api_base, llm.model, url_field="api_base",
                suggest="OpenAILike", engine=engine, api_key=llm.api_key,
                headers=llm.default_headers, timeout=llm.timeout, max_retries=llm.max_retries,
                options=dict(server_options or {}),
            )
    raise unsupported_llm(llm, _KINDS, "the synthesizer's generator argument")


def _from_huggingface(llm: Any) -> AnswerGenerator:
    model, tokenizer = getattr(llm, "_model", None), getattr(llm, "_tokenizer", None)
    if model is None or tokenizer is None:
        missing = "model" if model is None else "tokenizer"
        raise InvalidInputError(
            f"the HuggingFaceLLM has no {missing}, and citeformer runs the model under a "
            f"grammar built on the tokenizer's vocabulary; build it with "
            "HuggingFaceLLM(model=model, tokenizer=tokenizer)"
        )
    from citeformer import CiteGenerator

    return CiteGenerator(model, tokenizer)
