"""The user's own LangChain model, turned into the citeformer generator that runs it.

``HuggingFacePipeline`` and ``ChatHuggingFace`` (langchain-huggingface) hold a transformers model
and tokenizer in this process: they become a ``CiteGenerator`` over that very model. ``ChatOpenAI``
and ``OpenAI`` (langchain-openai) pointed at a llama.cpp, vLLM or SGLang server become a
``ServerGenerator`` on that server. Nothing else can enforce the citation grammar, so anything
else is refused, naming what was given and the kinds accepted.

Kinds are recognised by class, and the optional packages are imported only when the object's own
class (or a base of it) comes from them: importing ``citeformer_langchain`` imports neither.

``GeneratorStep`` is the base of the chain steps run by one generator (``CitationRunnable``,
``StandaloneQuestion``): given, built from ``llm=``, or the embedded default.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any, Generic, TypeVar

from langchain_core.runnables import RunnableSerializable
from pydantic import ConfigDict, Field, PrivateAttr, field_validator
from pydantic.json_schema import SkipJsonSchema

from citeformer.errors import InputTypeError, InvalidInputError
from citeformer.generation.protocols import AnswerGenerator
from citeformer.integration import (
    AsyncAnswering,
    as_async,
    as_async_loaded,
    check_generator,
    or_default,
    packages_of,
    refuse_server_settings,
    resolve_generator,
    server_for_openai_model,
    unknown_names_message,
    unsupported_llm,
)
from citeformer_langchain.tracing import TracedModel

__all__ = ["ACCEPTED_MODELS", "GeneratorStep", "generator_from"]

ACCEPTED_MODELS = (
    "langchain_huggingface.HuggingFacePipeline",
    "langchain_huggingface.ChatHuggingFace",
    "langchain_openai.ChatOpenAI",
    "langchain_openai.OpenAI",
)
"""The model classes ``llm=`` takes; the OpenAI ones with a ``base_url`` and an ``engine=``."""

_PACKAGES = ("langchain_huggingface", "langchain_openai")
_KINDS = (
    "a HuggingFacePipeline or ChatHuggingFace (langchain-huggingface), or a ChatOpenAI or OpenAI "
    "with a base_url (langchain-openai)"
)


def generator_from(
    llm: object, *, engine: str | None = None, server_options: Mapping[str, Any] | None = None
) -> AnswerGenerator:
    """The generator that runs ``llm`` under the citation grammar.

    ``engine`` (``"llama.cpp"``, ``"vllm"``, ``"vllm-guided"``, ``"sglang"``) is required for
    an OpenAI-compatible model, and refused for one in this process: a URL does not say which
    engine serves it, and each engine reads the grammar from a different request field.
    ``server_options`` are more ``ServerGenerator`` keywords (``timeout``, ``deadline``,
    ``max_retries``, ``headers``, ``context_length``, ``transport``); they win over the values
    read from the model.
    """
    packages = packages_of(llm, _PACKAGES)
    if "langchain_huggingface" in packages:
        from langchain_huggingface import ChatHuggingFace, HuggingFacePipeline

        if isinstance(llm, (ChatHuggingFace, HuggingFacePipeline)):
            refuse_server_settings(
                llm, "OpenAI-compatible model (ChatOpenAI, OpenAI)", engine, server_options
            )
            return _from_huggingface(llm)
    if "langchain_openai" in packages:
        from langchain_openai import ChatOpenAI, OpenAI

        if isinstance(llm, (ChatOpenAI, OpenAI)):
            kind = type(llm).__name__
            return server_for_openai_model(
                kind, llm.openai_api_base, llm.model_name, url_field="base_url", suggest=kind,
                engine=engine, api_key=_secret(llm.openai_api_key), headers=llm.default_headers,
                timeout=llm.request_timeout, max_retries=llm.max_retries,
                options=dict(server_options or {}),
            )
    raise unsupported_llm(llm, _KINDS, "generator=")


def _from_huggingface(llm: Any) -> AnswerGenerator:
    from langchain_huggingface import ChatHuggingFace, HuggingFacePipeline

    kind = type(llm).__name__
    tokenizer = None
    if isinstance(llm, ChatHuggingFace):
        tokenizer = llm.tokenizer
        if not isinstance(llm.llm, HuggingFacePipeline):
            raise InputTypeError(
                f"ChatHuggingFace(llm=...) wraps a {type(llm.llm).__name__}; only a "
                "HuggingFacePipeline runs here, where the citation grammar can mask its tokens "
                "(a Hugging Face endpoint takes no grammar)"
            )
        llm = llm.llm
    pipeline = llm.pipeline
    if pipeline is None:
        raise InvalidInputError(f"the {kind} has no pipeline; build it with "
                                "HuggingFacePipeline(pipeline=transformers.pipeline(...))")
    task = getattr(pipeline, "task", "text-generation")
    if task != "text-generation":
        raise InvalidInputError(
            f"the {kind}'s pipeline does the task {task!r}; citeformer needs a causal language "
            "model, a pipeline('text-generation', model=..., tokenizer=...)"
        )
    tokenizer = tokenizer if tokenizer is not None else getattr(pipeline, "tokenizer", None)
    if tokenizer is None:
        raise InvalidInputError(
            f"the {kind}'s pipeline has no tokenizer, and the citation grammar is built on the "
            "tokenizer's vocabulary; build the pipeline with "
            "transformers.pipeline('text-generation', model=model, tokenizer=tokenizer)"
        )
    from citeformer import CiteGenerator

    return CiteGenerator(pipeline.model, tokenizer)


def _secret(value: Any) -> str | None:
    if value is None:
        return None
    if hasattr(value, "get_secret_value"):
        return str(value.get_secret_value())
    if callable(value) and not inspect.iscoroutinefunction(value):
        return str(value())
    if isinstance(value, str):
        return value
    raise InputTypeError(
        f"the model's api_key is a {type(value).__name__}; pass it as a string"
    )


Input = TypeVar("Input")
Output = TypeVar("Output")


class GeneratorStep(RunnableSerializable[Input, Output], Generic[Input, Output]):
    """A chain step run by one citeformer generator: given, built from ``llm``, or the default.

    ``llm=`` takes your own LangChain model as it is: a ``HuggingFacePipeline`` or a
    ``ChatHuggingFace`` over one (a ``CiteGenerator`` over its model and tokenizer), or a
    ``ChatOpenAI``/``OpenAI`` with a ``base_url`` and ``engine=`` (a ``ServerGenerator`` on that
    server, with the model's name, API key, headers, timeout and retries). Any other model, a
    misspelt keyword, or an OpenAI model without a ``base_url`` (OpenAI's own API takes no
    grammar) is refused at construction, naming it.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    generator: SkipJsonSchema[AnswerGenerator | None] = Field(default=None, exclude=True)
    """A ``citeformer.CiteGenerator``, a ``citeformer.ServerGenerator`` (a llama.cpp, vLLM or
    SGLang server), or any ``citeformer.AnswerGenerator`` (``answer``/``answer_stream``);
    ``None`` (with no ``llm``) uses the embedded default model, loaded once per process on first
    use."""

    llm: SkipJsonSchema[Any] = Field(default=None, exclude=True)
    """Your own LangChain model instead of ``generator``: a ``HuggingFacePipeline``, a
    ``ChatHuggingFace`` over one, or a ``ChatOpenAI``/``OpenAI`` with a ``base_url`` (then
    ``engine=`` too). It runs under the citation grammar as it is."""

    engine: str | None = None
    """Which engine serves an OpenAI-compatible ``llm``: ``"llama.cpp"``, ``"vllm"``,
    ``"vllm-guided"`` or ``"sglang"``. Required with ``ChatOpenAI``/``OpenAI``, refused
    otherwise."""

    server_options: dict[str, Any] = Field(default_factory=dict, exclude=True)
    """More ``ServerGenerator`` keywords for an OpenAI-compatible ``llm`` (``timeout``,
    ``deadline``, ``max_retries``, ``headers``, ``context_length``, ``transport``)."""

    _built: AnswerGenerator | None = PrivateAttr(default=None)

    def __init__(self, **fields: Any) -> None:
        unknown = set(fields) - set(type(self).model_fields)
        if unknown:
            raise InputTypeError(
                unknown_names_message(type(self).__name__, unknown, type(self).model_fields)
            )
        super().__init__(**fields)
        self._built = resolve_generator(
            type(self).__name__, self.generator, self.llm, engine=self.engine,
            server_options=self.server_options, from_llm=generator_from,
        )

    @field_validator("generator", mode="before")
    @classmethod
    def _check_generator(cls, value: object) -> object:
        return check_generator(value, llm_kind="LangChain model")

    @property
    def resolved_generator(self) -> AnswerGenerator | None:
        """The generator given or built from ``llm``; ``None`` means the embedded default."""
        return self._built

    def _generator(self) -> AnswerGenerator:
        return or_default(self._built)

    def _served(self) -> bool:
        # An async generator (ServerGenerator) is awaited, and answers many requests at once.
        return self._built is not None and as_async(self._built).native

    def _traced(self, generator: AnswerGenerator) -> TracedModel:
        """How a call of ``generator`` is reported to LangChain's callbacks: as ``llm`` when
        one was given."""
        return TracedModel.of(generator, self.llm)

    async def _agenerator(self) -> AnswerGenerator:
        """The generator; loading the default model (seconds) runs off the event loop."""
        return (await self._answering()).generator

    async def _answering(self) -> AsyncAnswering:
        """The generator, asked from coroutines (``citeformer.integration.as_async``); loading
        the default model (seconds) runs off the event loop."""
        if self._built is not None:
            return as_async(self._built)
        return await as_async_loaded(self._generator)
