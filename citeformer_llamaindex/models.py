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
from urllib.parse import urlsplit

from citeformer.errors import InputTypeError, InvalidInputError
from citeformer.types import AnswerGenerator

ACCEPTED_MODELS = (
    "llama_index.llms.huggingface.HuggingFaceLLM",
    "llama_index.llms.openai_like.OpenAILike",
    "llama_index.llms.openai.OpenAI",
)
"""The LLM classes ``llm=`` takes; the OpenAI ones with an ``api_base`` and an ``engine=``."""

OPENAI_HOSTS = ("api.openai.com",)
"""Hosts whose API takes no grammar."""

_PACKAGES = (
    "llama_index.llms.huggingface", "llama_index.llms.openai_like", "llama_index.llms.openai",
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
    packages = _packages_of(llm)
    if "llama_index.llms.huggingface" in packages:
        from llama_index.llms.huggingface import HuggingFaceLLM

        if isinstance(llm, HuggingFaceLLM):
            from citeformer.server._openai import refuse_server_settings

            refuse_server_settings(
                llm, "OpenAI-compatible LLM (OpenAILike, OpenAI)", engine, server_options
            )
            return _from_huggingface(llm)
    if "llama_index.llms.openai" in packages:
        from llama_index.llms.openai import OpenAI

        if isinstance(llm, OpenAI):  # OpenAILike is one
            return _from_openai(llm, engine, dict(server_options or {}))
    raise InputTypeError(
        f"llm= takes a HuggingFaceLLM (llama-index-llms-huggingface), or an OpenAILike or "
        f"OpenAI with an api_base of a llama.cpp, vLLM or SGLang server "
        f"(llama-index-llms-openai-like); got a {type(llm).__qualname__} "
        f"({type(llm).__module__}.{type(llm).__qualname__}), which cannot run under the "
        "citation grammar. A citeformer generator (CiteGenerator, ServerGenerator, "
        "citeformer.testing.FakeGenerator) is the synthesizer's first argument instead"
    )


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


def _from_openai(llm: Any, engine: str | None, options: dict[str, Any]) -> AnswerGenerator:
    kind = type(llm).__name__
    base_url = llm.api_base
    if not base_url or urlsplit(base_url).hostname in OPENAI_HOSTS:
        raise InvalidInputError(
            f"the {kind} has no api_base of its own, so it talks to OpenAI's API "
            f"({base_url}), which takes no grammar; point it at a llama.cpp, vLLM or SGLang "
            f"server: OpenAILike(api_base='http://host:8000/v1', model=...), and pass "
            "engine='vllm' (or 'llama.cpp', 'sglang', 'vllm-guided')"
        )
    from citeformer.server._openai import server_for_openai_model

    return server_for_openai_model(
        kind, base_url, llm.model, engine=engine, api_key=llm.api_key,
        headers=llm.default_headers, timeout=llm.timeout, max_retries=llm.max_retries,
        options=options,
    )


def _packages_of(value: object) -> set[str]:
    # The class and its bases, so that a subclass is recognised too; never an import.
    found = set()
    for klass in type(value).__mro__:
        for package in _PACKAGES:
            if klass.__module__ == package or klass.__module__.startswith(package + "."):
                found.add(package)
    return found


