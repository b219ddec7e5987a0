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

import difflib
import inspect
from collections.abc import Mapping
from typing import Any, Generic, TypeVar
from urllib.parse import urlsplit

from langchain_core.runnables import RunnableSerializable
from pydantic import ConfigDict, Field, PrivateAttr, field_validator
from pydantic.json_schema import SkipJsonSchema

from citeformer.errors import InputTypeError, InvalidInputError
from citeformer.types import AnswerGenerator, AsyncAnswerGenerator

ACCEPTED_MODELS = (
    "langchain_huggingface.HuggingFacePipeline",
    "langchain_huggingface.ChatHuggingFace",
    "langchain_openai.ChatOpenAI",
    "langchain_openai.OpenAI",
)
"""The model classes ``llm=`` takes; the OpenAI ones with a ``base_url`` and an ``engine=``."""

OPENAI_HOSTS = ("api.openai.com",)
"""Hosts whose API takes no grammar."""

_PACKAGES = ("langchain_huggingface", "langchain_openai")
_KINDS = (
    "HuggingFacePipeline or ChatHuggingFace (langchain-huggingface), or a ChatOpenAI or OpenAI "
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
    package = _package_of(llm)
    if package == "langchain_huggingface":
        from langchain_huggingface import ChatHuggingFace, HuggingFacePipeline

        if isinstance(llm, (ChatHuggingFace, HuggingFacePipeline)):
            from citeformer.server._openai import refuse_server_settings

            refuse_server_settings(
                llm, "OpenAI-compatible model (ChatOpenAI, OpenAI)", engine, server_options
            )
            return _from_huggingface(llm)
    elif package == "langchain_openai":
        from langchain_openai import ChatOpenAI, OpenAI

        if isinstance(llm, (ChatOpenAI, OpenAI)):
            return _from_openai(llm, engine, dict(server_options or {}))
    raise InputTypeError(
        f"llm= takes a {_KINDS}; got a {type(llm).__qualname__} ({_qualified(type(llm))}), "
        "which cannot run under the citation grammar. A citeformer generator (CiteGenerator, "
        "ServerGenerator, citeformer.testing.FakeGenerator) goes to generator= instead"
    )


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


def _from_openai(llm: Any, engine: str | None, options: dict[str, Any]) -> AnswerGenerator:
    kind = type(llm).__name__
    base_url = llm.openai_api_base
    if not base_url or urlsplit(base_url).hostname in OPENAI_HOSTS:
        raise InvalidInputError(
            f"the {kind} has no base_url, so it talks to OpenAI's API, which takes no grammar; "
            f"point it at a llama.cpp, vLLM or SGLang server: "
            f"{kind}(base_url='http://host:8000/v1', model=...), and pass engine='vllm' (or "
            "'llama.cpp', 'sglang', 'vllm-guided')"
        )
    from citeformer.server._openai import server_for_openai_model

    return server_for_openai_model(
        kind, base_url, llm.model_name, engine=engine, api_key=_secret(llm.openai_api_key),
        headers=llm.default_headers, timeout=llm.request_timeout, max_retries=llm.max_retries,
        options=options,
    )


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


def _package_of(value: object) -> str | None:
    # The class and its bases, so that a subclass of HuggingFacePipeline is recognised too.
    for klass in type(value).__mro__:
        root = klass.__module__.partition(".")[0]
        if root in _PACKAGES:
            return root
    return None


def _qualified(klass: type) -> str:
    return f"{klass.__module__}.{klass.__qualname__}"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


Input = TypeVar("Input")
Output = TypeVar("Output")


class GeneratorStep(RunnableSerializable[Input, Output], Generic[Input, Output]):
    """A chain step run by one citeformer generator: given, built from ``llm``, or the default.

    A misspelt or unknown keyword is refused at construction, naming it.
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
        unknown = sorted(set(fields) - set(type(self).model_fields))
        if unknown:
            raise InputTypeError(_unknown_message(type(self), unknown))
        super().__init__(**fields)
        if self.llm is not None:
            if self.generator is not None:
                raise InvalidInputError(
                    f"{type(self).__name__} got both generator= and llm=; pass one: llm= is "
                    "turned into a generator"
                )
            self._built = generator_from(
                self.llm, engine=self.engine, server_options=self.server_options
            )
        elif self.engine is not None or self.server_options:
            raise InvalidInputError(
                "engine= and server_options= describe the server of an OpenAI-compatible llm=; "
                "without llm= they do nothing. Build a citeformer.ServerGenerator and pass it "
                "as generator= instead"
            )

    @field_validator("generator", mode="before")
    @classmethod
    def _check_generator(cls, value: object) -> object:
        if value is not None and not isinstance(value, AnswerGenerator):
            missing = [m for m in ("answer", "answer_stream") if not hasattr(value, m)]
            raise InputTypeError(
                f"generator must be a citeformer.CiteGenerator, a ServerGenerator or another "
                f"AnswerGenerator (or None for the embedded model); got {_short(value)} of "
                f"type {type(value).__name__}, which has no "
                f"{' or '.join(f'{m}()' for m in missing) or 'callable answer()'}. A LangChain "
                "model goes to llm="
            )
        return value

    @property
    def resolved_generator(self) -> AnswerGenerator | None:
        """The generator given or built from ``llm``; ``None`` means the embedded default."""
        return self.generator if self.generator is not None else self._built

    def _generator(self) -> AnswerGenerator:
        generator = self.resolved_generator
        if generator is not None:
            return generator
        from citeformer import CiteGenerator

        return CiteGenerator.default()

    def _served(self) -> bool:
        # An async generator (ServerGenerator) is awaited, and answers many requests at once.
        return isinstance(self.resolved_generator, AsyncAnswerGenerator)


def _unknown_message(klass: type[GeneratorStep[Any, Any]], unknown: list[str]) -> str:
    fields = sorted(klass.model_fields)
    hints = []
    for name in unknown:
        close = difflib.get_close_matches(name, fields, n=1)
        hints.append(f"{name!r} (did you mean {close[0]!r}?)" if close else repr(name))
    return (
        f"{klass.__name__} has no field {', '.join(hints)}; its fields are {', '.join(fields)}"
    )
