"""The errors of a server that did not answer with a completion, worded with what it said.

Nothing shown holds a password: ``redact`` hides the one of any URL in a message.
"""

from __future__ import annotations

import json
import re
from typing import Any

import httpx

from citeformer.errors import ServerConnectionError, ServerResponseError

_PASSWORD = re.compile(r"(//[^/@\s]*?:)[^/@\s]*@")


def redact(text: object) -> str:
    """``text`` with the password of any URL in it (``//user:secret@``) shown as ``***``."""
    return _PASSWORD.sub(r"\1***@", str(text))


def connection_error(error: Exception, base_url: str, retries: int) -> ServerConnectionError:
    """The server could not be reached (after ``retries`` retries)."""
    tried = f" (after {retries + 1} attempts)" if retries else ""
    reason = redact(error) or type(error).__name__
    if isinstance(error, httpx.TimeoutException):
        reason = f"no answer within the timeout ({type(error).__name__})"
    elif isinstance(error, httpx.RemoteProtocolError):
        # The server was reached: what it sent is not HTTP this client accepts.
        if "buffer too long" in reason.lower() or "header" in reason.lower():
            reason = f"its response headers are larger than a client accepts ({reason})"
        return ServerConnectionError(
            f"the server at {base_url} answered with a malformed HTTP response{tried}: "
            f"{reason}; check the server, or a proxy in front of it"
        )
    return ServerConnectionError(
        f"could not reach the server at {base_url}{tried}: {reason}; check that it is running "
        "and that the URL is right"
    )


def response_error(
    response: httpx.Response, said: bytes, base_url: str, retries: int
) -> ServerResponseError:
    """An answer with an HTTP error status, worded with what the server ``said`` in it."""
    body = said.decode(response.encoding or "utf-8", errors="replace")
    try:
        message = error_message(json.loads(body))
    except (ValueError, RecursionError):
        message = body.strip()[:1000] or "(empty body)"
    tried = f" (after {retries + 1} attempts)" if retries else ""
    hint = ""
    if response.status_code in (400, 422) and any(
        word in message.lower() for word in ("grammar", "ebnf", "structured", "guided")
    ):
        hint = (
            " The server rejected the grammar request: check the engine "
            "(ServerGenerator(engine=...): 'llama.cpp', 'vllm', 'vllm-guided' or 'sglang')."
        )
    elif response.status_code in (401, 403):
        hint = " Set the API key (api_key=..., or $CITEFORMER_API_KEY / $OPENAI_API_KEY)."
    elif response.status_code == 404:
        hint = " Check the URL (the server's OpenAI-compatible root, e.g. http://host:8080/v1)."
    return ServerResponseError(
        f"the server at {base_url} answered {response.status_code} "
        f"{response.reason_phrase or ''}{tried} to {response.request.method} "
        f"{response.request.url.path}: {message.rstrip('.')}.{hint}",
        status_code=response.status_code,
        body=body,
    )


def redirect_error(response: httpx.Response, base_url: str) -> ServerResponseError:
    """An answer that sends the request elsewhere: said, with where to, never followed."""
    location = redact(response.headers.get("Location", "")) or "(no Location header)"
    return ServerResponseError(
        f"the server at {base_url} redirected {response.request.method} "
        f"{response.request.url.path} to {location} ({response.status_code} "
        f"{response.reason_phrase}); requests are not sent on to another address: give the "
        "address it redirects to as the server URL",
        status_code=response.status_code,
        body=location,
    )


def error_message(data: Any) -> str:
    """What an error body says.

    OpenAI's shape is ``{"error": {"message": ...}}``, FastAPI's ``{"detail": [...]}``; some
    engines send ``{"error": "..."}`` or ``{"message": ...}``.
    """
    if isinstance(data, dict):
        error = data.get("error", data)
        if isinstance(error, dict):
            for key in ("message", "detail", "msg"):
                if key in error:
                    value = error[key]
                    return value if isinstance(value, str) else json.dumps(value)[:1000]
        if isinstance(error, str):
            return error
    return json.dumps(data)[:1000]


def json_of(body: bytes, base_url: str) -> Any:
    """The JSON an answer holds; anything else is a ``ServerResponseError``."""
    try:
        return json.loads(body)
    except ValueError as error:
        text = body.decode(errors="replace")
        raise ServerResponseError(
            f"the server at {base_url} answered with something that is not JSON: {text[:300]!r}",
            status_code=200, body=text,
        ) from error
    except RecursionError as error:  # arrays or objects nested thousands deep
        text = body.decode(errors="replace")
        raise ServerResponseError(
            f"the server at {base_url} answered with JSON nested too deeply to be an answer: "
            f"{text[:300]!r}",
            status_code=200, body=text[:1000],
        ) from error


def undecodable_body(error: httpx.DecodingError, base_url: str) -> ServerResponseError:
    """A body its ``Content-Encoding`` (gzip, deflate, ...) cannot decode."""
    return ServerResponseError(
        f"the server at {base_url} sent a body that its Content-Encoding cannot decode "
        f"({redact(error) or type(error).__name__}); the answer was not returned",
        status_code=200, body="",
    )


def first_model(body: bytes, base_url: str) -> str:
    """The first model a ``GET /models`` answer lists."""
    data = json_of(body, base_url)
    models = data.get("data") if isinstance(data, dict) else None
    name = models[0].get("id") if isinstance(models, list) and models and isinstance(
        models[0], dict) else None
    if not isinstance(name, str) or not name:
        raise ServerResponseError(
            f"the server at {base_url} lists no model at GET /v1/models; pass model=...",
            status_code=200, body=body.decode(errors="replace")[:1000],
        )
    return name
