"""What the LangChain and LlamaIndex wrappers share, with no framework in it.

Each wrapper translates its framework's types to the core's and back. What is left is the same in
both, and is written here once:

- asking a generator from a coroutine, never blocking the event loop (``as_async``,
  ``as_async_loaded``; ``citeformer.generation.aio``);
- settings: the options a wrapper is built with (``setting_names``), checked once into a request
  template (``settings_template``), and each call's request made from it (``call_request``);
- generators: the one a wrapper runs, given or built from the user's own model
  (``check_generator``, ``resolve_generator``, ``unsupported_llm``, ``packages_of``,
  ``or_default``), and the ``ServerGenerator`` an OpenAI-compatible model object stands for
  (``server_for_openai_model``, ``refuse_server_settings``, ``OPENAI_HOSTS``);
- sources with blank text, left out or refused (``keep_with_text``, ``EmptySources``);
- the turns of a chat history in the core's roles (``history_turn``);
- the words of their errors: a value shown in a message (``short``), a misspelt keyword
  (``unknown_names_message``).

Importing it imports no framework, and no torch.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeVar
from urllib.parse import urlsplit

from citeformer.errors import EmptySourceError, InputTypeError, InvalidInputError
from citeformer.generation.aio import AsyncAnswering, AsyncChunks, as_async, as_async_loaded
from citeformer.generation.protocols import AnswerGenerator
from citeformer.grammar.rules import GrammarOptions
from citeformer.request import (
    DEFAULT_POLICY,
    GenerationRequest,
    SourceLike,
    request_option_names,
    request_template,
)

if TYPE_CHECKING:
    from citeformer.server import ServerGenerator

__all__ = [
    "CALL_ONLY",
    "GRAMMAR_SETTING",
    "OPENAI_HOSTS",
    "AsyncAnswering",
    "AsyncChunks",
    "EmptySources",
    "as_async",
    "as_async_loaded",
    "call_request",
    "check_empty_sources",
    "check_generator",
    "grammar_of",
    "history_turn",
    "keep_with_text",
    "or_default",
    "packages_of",
    "refuse_server_settings",
    "resolve_generator",
    "server_for_openai_model",
    "setting_names",
    "settings_template",
    "short",
    "unknown_names_message",
    "unsupported_llm",
]

T = TypeVar("T")

# -- settings ---------------------------------------------------------------------------------

GRAMMAR_SETTING = "grammar_options"
"""The name a wrapper gives ``GenerationRequest.grammar``: a mapping of grammar options
(``{"max_sentence_words": 16}``), those left out keeping the core's defaults."""

CALL_ONLY = ("history", "prompt")
"""Request options that belong to one call, never to a wrapper's settings: the earlier turns come
with each input, and a whole prompt would have to number that call's sources."""


def setting_names() -> tuple[str, ...]:
    """The generation settings of a wrapper, in order.

    ``policy``, then ``GenerationRequest``'s options (``request_option_names``) but
    ``CALL_ONLY``, its ``grammar`` spelled ``GRAMMAR_SETTING``.
    """
    return ("policy", *(
        GRAMMAR_SETTING if name == "grammar" else name
        for name in request_option_names() if name not in CALL_ONLY
    ))


def grammar_of(value: object) -> GrammarOptions:
    """The ``GrammarOptions`` of a ``GRAMMAR_SETTING`` value: a mapping, options or ``None``."""
    if value is None:
        return GrammarOptions()
    if isinstance(value, GrammarOptions):
        return value
    if isinstance(value, Mapping):
        return GrammarOptions.of(value)
    raise InputTypeError(
        f"{GRAMMAR_SETTING} must be a dict of grammar options, such as "
        f"{{'max_sentence_words': 16}}, got {type(value).__name__} {short(value)}"
    )


def settings_template(settings: Mapping[str, Any]) -> GenerationRequest:
    """A wrapper's settings, checked once, as the template each call's request is made from.

    ``settings`` are named as ``setting_names()`` says (a grammar option may also be given by its
    own name); those left out keep the core's defaults. ``CALL_ONLY`` options are refused.
    Raises what ``GenerationRequest`` raises for a bad value, naming it.
    """
    options = dict(settings)
    call_only = [name for name in CALL_ONLY if name in options]
    if call_only:
        raise InputTypeError(
            f"{' and '.join(call_only)} belong to one call, not to the settings: the earlier "
            "turns come with each input (chat_history), and the prompt is built from that "
            "call's sources"
        )
    policy = options.pop("policy", DEFAULT_POLICY)
    if GRAMMAR_SETTING in options:
        if "grammar" in options:
            raise InputTypeError(
                f"got both {GRAMMAR_SETTING}= and grammar=; pass one (a dict of grammar options, "
                "or a citeformer.GrammarOptions)"
            )
        options["grammar"] = grammar_of(options.pop(GRAMMAR_SETTING))
    return request_template(policy, **options)


def call_request(
    template: GenerationRequest,
    question: object,
    sources: Sequence[SourceLike],
    **changes: Any,
) -> GenerationRequest:
    """One call's request: ``template`` with its question, its sources and its own options.

    ``changes`` are named as in ``setting_names()`` (or a grammar option by its name); the
    request checks all of it again.
    """
    if GRAMMAR_SETTING in changes:
        # The call's grammar options replace the settings' as a whole, as a field would.
        changes["grammar"] = grammar_of(changes.pop(GRAMMAR_SETTING))
    return template.replace(question=question, sources=sources, **changes)


# -- generators -------------------------------------------------------------------------------

OPENAI_HOSTS = ("api.openai.com",)
"""Hosts whose API takes no grammar."""


def check_generator(value: object, *, llm_kind: str) -> AnswerGenerator | None:
    """``value`` if it is an ``AnswerGenerator`` or ``None`` (the embedded default).

    Anything else raises, naming what it lacks; ``llm_kind`` names the framework's models
    (``"LangChain model"``), which go to ``llm=`` instead.
    """
    if value is None or isinstance(value, AnswerGenerator):
        return value
    missing = [m for m in ("answer", "answer_stream") if not hasattr(value, m)]
    raise InputTypeError(
        f"generator must be a citeformer.CiteGenerator, a ServerGenerator or another "
        f"AnswerGenerator (or None for the embedded model); got {short(value)} of type "
        f"{type(value).__name__}, which has no "
        f"{' or '.join(f'{m}()' for m in missing) or 'callable answer()'}. A {llm_kind} goes to "
        "llm="
    )


def resolve_generator(
    owner: str,
    generator: AnswerGenerator | None,
    llm: object,
    *,
    engine: str | None,
    server_options: Mapping[str, Any] | None,
    from_llm: Callable[..., AnswerGenerator],
    generator_place: str = "generator=",
) -> AnswerGenerator | None:
    """The generator ``owner`` runs: ``generator``, or the one built from ``llm``.

    ``from_llm(llm, engine=..., server_options=...)`` builds it; ``None`` means the embedded
    default, loaded on first use. ``generator_place`` says, in messages, how ``owner`` takes a
    generator.
    """
    if llm is None:
        if engine is not None or server_options:
            raise InvalidInputError(
                "engine= and server_options= describe the server of an OpenAI-compatible llm=; "
                "without llm= they do nothing. Build a citeformer.ServerGenerator and pass it "
                f"as {generator_place} instead"
            )
        return generator
    if generator is not None:
        raise InvalidInputError(
            f"{owner} got both {generator_place} and llm=; pass one: llm= is turned into a "
            "generator"
        )
    return from_llm(llm, engine=engine, server_options=server_options)


def or_default(generator: AnswerGenerator | None) -> AnswerGenerator:
    """``generator``, or the embedded default model (loaded once per process) for ``None``."""
    if generator is not None:
        return generator
    from citeformer import CiteGenerator

    return CiteGenerator.default()


def packages_of(value: object, packages: Iterable[str]) -> set[str]:
    """Those of ``packages`` that the class of ``value``, or a base of it, comes from.

    Read from the classes' modules, so that no optional package is ever imported to tell.
    """
    found = set()
    for klass in type(value).__mro__:
        for package in packages:
            if klass.__module__ == package or klass.__module__.startswith(package + "."):
                found.add(package)
    return found


def unsupported_llm(llm: object, kinds: str, generator_place: str) -> InputTypeError:
    """The error for an ``llm=`` of a kind that cannot run under the citation grammar.

    ``kinds`` lists those a wrapper takes (``"a HuggingFaceLLM (...)"``); ``generator_place``
    says where a citeformer generator goes instead.
    """
    klass = type(llm)
    return InputTypeError(
        f"llm= takes {kinds}; got a {klass.__qualname__} ({klass.__module__}."
        f"{klass.__qualname__}), which cannot run under the citation grammar. A citeformer "
        "generator (CiteGenerator, ServerGenerator, citeformer.testing.FakeGenerator) goes to "
        f"{generator_place} instead"
    )


def server_for_openai_model(
    kind: str,
    base_url: str | None,
    model: str | None,
    *,
    url_field: str,
    suggest: str,
    engine: str | None,
    api_key: str | None,
    headers: Mapping[str, str] | None,
    timeout: object,
    max_retries: object,
    options: Mapping[str, Any],
) -> ServerGenerator:
    """The ``ServerGenerator`` that a framework's OpenAI-compatible model at ``base_url`` is.

    ``kind`` names the model's class (``ChatOpenAI``, ``OpenAILike``...) in messages,
    ``url_field`` its address field (``base_url``, ``api_base``), ``suggest`` the class to point
    at a server. Its key, headers, timeout and retries are carried over; ``options`` override
    them. OpenAI's own API (no address, or one of ``OPENAI_HOSTS``) is refused: it takes no
    grammar. ``engine`` is required: the URL does not say which engine serves it, and each reads
    the grammar from a different request field.
    """
    # Imported here: the server client (httpx) loads only for a served model.
    from citeformer.server import ENGINES, ServerGenerator

    if not base_url or urlsplit(base_url).hostname in OPENAI_HOSTS:
        talks = (
            f"talks to OpenAI's API ({base_url})" if base_url
            else f"has no {url_field}, so it talks to OpenAI's API"
        )
        raise InvalidInputError(
            f"the {kind} {talks}, which takes no grammar; point it at a llama.cpp, vLLM or "
            f"SGLang server: {suggest}({url_field}='http://host:8000/v1', model=...), and pass "
            "engine='vllm' (or 'llama.cpp', 'sglang', 'vllm-guided')"
        )
    if engine is None:
        raise InvalidInputError(
            f"the {kind} at {base_url} needs engine=: one of {', '.join(map(repr, ENGINES))}. "
            "The URL does not say which engine serves it, and each reads the grammar from a "
            "different request field (a wrong one is ignored, and the answer refused)"
        )
    settings: dict[str, Any] = {"api_key": api_key or None}
    if headers:
        settings["headers"] = dict(headers)
    if isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
        settings["timeout"] = float(timeout)
    if isinstance(max_retries, int) and not isinstance(max_retries, bool):
        settings["max_retries"] = max_retries
    return ServerGenerator(base_url, model, engine=engine, **{**settings, **options})


def refuse_server_settings(
    llm: object, applies_to: str, engine: str | None, server_options: Mapping[str, Any] | None
) -> None:
    """Refuse ``engine=``/``server_options=`` given with a model that runs in this process.

    ``applies_to`` names, for the message, the models they are for (``"OpenAI-compatible model
    (ChatOpenAI, OpenAI)"``).
    """
    given = [name for name, value in (("engine", engine), ("server_options", server_options))
             if value]
    if given:
        raise InvalidInputError(
            f"{' and '.join(given)} apply to an {applies_to} only; a "
            f"{type(llm).__name__} runs in this process: drop {given[0]}="
        )


# -- blank sources ----------------------------------------------------------------------------

EmptySources = Literal["drop", "raise"]
"""What a wrapper does with a source whose text is blank: leave it out (logged) or raise."""


def check_empty_sources(value: object, name: str = "empty_sources") -> EmptySources:
    """``value`` if it is ``"drop"`` or ``"raise"``; else an error naming ``name``."""
    if value == "drop":
        return "drop"
    if value == "raise":
        return "raise"
    raise InvalidInputError(f"{name} must be 'drop' or 'raise', got {value!r}")


def keep_with_text(
    items: Sequence[T],
    text: Callable[[T], str],
    empty_sources: EmptySources,
    *,
    noun: str,
    field: str,
    label: Callable[[T], str],
    origin: str = "",
    logger: logging.Logger,
) -> list[T]:
    """``items`` without those whose ``text`` is blank, in order.

    A marker pointing at a blank source could support nothing, so it never gets a number: with
    ``"drop"`` it is left out and ``logger`` warns, with ``"raise"`` ``EmptySourceError``. Both
    name it as ``f"{noun} {position} of {total} ({label(item)}){origin}"`` (``"document 2 of 3
    (untitled) from input['context']"``), ``field`` being what is blank (``"page_content"``).
    """
    kept = []
    for position, item in enumerate(items, start=1):
        if text(item).strip():
            kept.append(item)
            continue
        name = f"{noun} {position} of {len(items)} ({label(item)}){origin}"
        if empty_sources == "raise":
            raise EmptySourceError(
                f"{name} has empty {field}; leave it out before this step, or pass "
                f"empty_sources='drop' to leave such {noun}s out: a marker pointing at one could "
                "support nothing"
            )
        logger.warning("dropping %s: its %s is empty", name, field)
    return kept


# -- chat history -----------------------------------------------------------------------------

_ROLES = {
    "user": "user", "human": "user",
    "assistant": "assistant", "ai": "assistant", "chatbot": "assistant", "model": "assistant",
}
"""The roles a turn of a history may have, each framework's names included, and the core's."""

_INSTRUCTION_ROLES = ("system", "developer")


def history_turn(
    role: object,
    text: object,
    where: str,
    *,
    noun: str = "turn",
    instructions_to: str | None = None,
) -> tuple[str, str]:
    """One turn of a chat history as the core's ``(role, text)``, or an error naming ``where``.

    User turns (``"user"``, ``"human"``) become ``"user"``; assistant ones (``"assistant"``,
    ``"ai"``, ``"chatbot"``, ``"model"``) ``"assistant"``, in any case. A system or developer
    turn is refused pointing at ``instructions=`` (of ``instructions_to``, when that is another
    object), any other role or a turn without text as such. ``noun`` is what the framework
    calls a turn (``"message"``).
    """
    key = role.lower() if isinstance(role, str) else None
    core = _ROLES.get(key) if key is not None else None
    if core is None:
        if key in _INSTRUCTION_ROLES:
            to = f" to the {instructions_to}" if instructions_to else ""
            advice = (
                f"the citation instructions are the one system message: pass instructions={to} "
                f"to replace them, and leave system {noun}s out of the history"
            )
        else:
            advice = f"keep only the user's and the assistant's {noun}s"
        raise InvalidInputError(
            f"{where} is a {role!r} {noun}; a history holds user and assistant {noun}s only: "
            f"{advice}"
        )
    if not isinstance(text, str) or not text.strip():
        raise InvalidInputError(f"{where} ({core}) has no text ({short(text)}); drop empty {noun}s")
    return core, text


# -- words of errors --------------------------------------------------------------------------


def short(value: object, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters (ending in ``...``), to show in a message."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit - 3]}..."


def unknown_names_message(
    owner: str, unknown: Iterable[str], known: Iterable[str], *, noun: str = "field",
    verb: str = "has",
) -> str:
    """The message refusing ``unknown`` names, each with its likely meaning among ``known``.

    It reads ``f"{owner} {verb} no {noun} ..."`` (``"CitationRunnable has no field"``), then
    lists all of ``known``.
    """
    names = sorted(known)
    hints = []
    for name in sorted(unknown):
        close = difflib.get_close_matches(name, names, n=1)
        hints.append(f"{name!r} (did you mean {close[0]!r}?)" if close else repr(name))
    return f"{owner} {verb} no {noun} {', '.join(hints)}; its {noun}s are {', '.join(names)}"
