"""A ServerGenerator for a framework's OpenAI-compatible model object pointed at a server."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from citeformer.errors import InvalidInputError
from citeformer.server._engines import ENGINES
from citeformer.server._generator import ServerGenerator


def server_for_openai_model(
    kind: str,
    base_url: str,
    model: str | None,
    *,
    engine: str | None,
    api_key: str | None,
    headers: Mapping[str, str] | None,
    timeout: object,
    max_retries: object,
    options: Mapping[str, Any],
) -> ServerGenerator:
    """The ``ServerGenerator`` that a framework's OpenAI-compatible model at ``base_url`` is.

    ``kind`` names the model's class (``ChatOpenAI``, ``OpenAILike``...) in messages. Its key,
    headers, timeout and retries are carried over; ``options`` override them.

    ``engine`` is required: the URL does not say which engine serves it, and each reads the
    grammar from a different request field.
    """
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
