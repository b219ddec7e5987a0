"""Requests to one server: its address and credentials, retries with backoff, the deadline.

``Transport`` sends a request and hands back the response as it starts to arrive, after retrying
what a busy or restarting server answers. ``_Attempts`` is that retry policy, written once: the
sync and the async loop differ only in how they send, read and wait. ``Deadline`` bounds one
whole call.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import math
import os
import random
import re
import ssl
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

import httpx

from citeformer.errors import (
    InputTypeError,
    InvalidInputError,
    ServerConnectionError,
    ServerResponseError,
)
from citeformer.server._errors import (
    connection_error,
    first_model,
    redact,
    redirect_error,
    response_error,
    undecodable_body,
)
from citeformer.server._network import AsyncDeadlineTransport, DeadlineTransport, capped

API_KEY_VARIABLES = ("CITEFORMER_API_KEY", "OPENAI_API_KEY")
DEFAULT_TIMEOUT_S = 120.0
DEFAULT_MAX_RETRIES = 2
DEFAULT_RETRY_BACKOFF_S = 0.5
RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
"""Busy or restarting servers and load balancers answer these; trying again is what helps."""
MAX_WAIT_S = 8.0
"""The longest wait before one retry, whatever the backoff or the server's Retry-After asks."""
MODELS_LIMIT_BYTES = 1 << 24
"""The most a ``GET /models`` answer may hold."""
SAID_LIMIT_BYTES = 1 << 16
"""The most of an error answer that is read (and quoted)."""

_SECONDS = re.compile(r"[0-9]+(\.[0-9]+)?", re.ASCII)


class Deadline:
    """The time one call may take in all, counted from its start (``None``: no total limit)."""

    def __init__(self, seconds: float | None, base_url: str) -> None:
        self.seconds = seconds
        self._base_url = base_url
        self._end = None if seconds is None else time.monotonic() + seconds

    def passed(self) -> bool:
        return self._end is not None and time.monotonic() >= self._end

    def check(self) -> None:
        """Raise once the deadline has passed."""
        if self.passed():
            raise self.error()

    def timeout(self, timeout: float) -> float:
        """``timeout``, shortened to the time left."""
        self.check()
        return timeout if self._end is None else min(timeout, self._end - time.monotonic())

    def wait(self, seconds: float) -> float:
        """``seconds``, if the deadline leaves room for that wait and a retry after it."""
        if self._end is not None and time.monotonic() + seconds >= self._end:
            raise self.error(f" (a retry was due in {seconds:.1f}s)")
        return seconds

    def bounding(self) -> contextlib.AbstractContextManager[None]:
        """A block in which no socket wait outlasts the deadline (``_network.capped``)."""
        return capped(self._end)

    def error(self, detail: str = "") -> ServerConnectionError:
        return ServerConnectionError(
            f"no complete answer from the server at {self._base_url} within the deadline of "
            f"{self.seconds:g}s{detail}; the answer was not returned. Raise deadline=..., or ask "
            "for fewer tokens (max_new_tokens)"
        )


class Transport:
    """Sends requests to one OpenAI-compatible server; retries what can be retried.

    A request is tried again after a connection error that came before any answer, or an answer
    408, 429 or 5xx, never once an answer has started to arrive. Retry ``a`` (from 0) waits
    ``retry_backoff * 2**a`` seconds with +-25% jitter, or what the server's ``Retry-After``
    asks (seconds or an HTTP date); every wait is cut to ``MAX_WAIT_S``.
    """

    def __init__(
        self,
        base_url: str,
        *,
        model: str | None,
        api_key: str | None,
        headers: dict[str, str] | None,
        timeout: float,
        max_retries: int,
        retry_backoff: float,
        transport: Any,
    ) -> None:
        self.base_url, credentials = api_root(base_url)
        self.timeout = seconds_of("timeout", timeout)
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise InvalidInputError(f"max_retries must be an int >= 0, got {max_retries!r}")
        self.max_retries = max_retries
        self.retry_backoff = seconds_of("retry_backoff", retry_backoff, zero=True)
        if model is not None and not (isinstance(model, str) and model.strip()):
            raise InputTypeError(
                f"model must be the served model's name or None, got {model!r}; None asks the "
                "server (GET /v1/models)"
            )
        self.model = model
        self._headers = {"Accept": "application/json", **(headers or {})}
        self._auth: httpx.Auth | None = None
        if credentials is not None:
            if api_key is not None:
                raise InvalidInputError(
                    f"the URL of the server at {self.base_url} holds a user name and password, "
                    "and api_key= is given too; a request carries one Authorization header: "
                    "give one of them"
                )
            # A header, never the URL: httpx logs URLs, and messages show them.
            self._auth = httpx.BasicAuth(*credentials)
        elif key := (api_key if api_key is not None else _api_key_from_env()):
            self._headers["Authorization"] = f"Bearer {key}"
        self._transport = transport
        self._client: httpx.Client | None = None
        self._client_lock = threading.Lock()
        self._ssl: ssl.SSLContext | None = None
        self._ssl_lock = threading.Lock()

    def send(self, method: str, path: str, body: Any, deadline: Deadline) -> httpx.Response:
        """The response to a request, after retries; open: the caller reads and closes it."""
        attempts = _Attempts(self, method, path, deadline)
        client = self.client()
        while True:
            try:
                outcome: httpx.Response | httpx.TransportError
                with deadline.bounding():
                    outcome = client.send(attempts.request(client, body), stream=True)
                if attempts.accepts(outcome):
                    return outcome
                said = self.read(outcome, deadline, SAID_LIMIT_BYTES, cut=True)
            except httpx.TransportError as error:
                outcome, said = error, b""
            time.sleep(attempts.wait(outcome, said))

    async def asend(
        self, client: httpx.AsyncClient, method: str, path: str, body: Any, deadline: Deadline
    ) -> httpx.Response:
        """Async ``send``, on a client of ``aclient``."""
        attempts = _Attempts(self, method, path, deadline)
        while True:
            try:
                outcome: httpx.Response | httpx.TransportError
                with deadline.bounding():
                    outcome = await client.send(attempts.request(client, body), stream=True)
                if attempts.accepts(outcome):
                    return outcome
                said = await self.aread(outcome, deadline, SAID_LIMIT_BYTES, cut=True)
            except httpx.TransportError as error:
                outcome, said = error, b""
            await asyncio.sleep(attempts.wait(outcome, said))

    def read(
        self, response: httpx.Response, deadline: Deadline, limit: int, *, cut: bool = False
    ) -> bytes:
        """The body of an open ``response``, which is then closed.

        More than ``limit`` bytes raise ``ServerResponseError``, or with ``cut`` end the read.
        """
        body = _Body(self.base_url, deadline, limit, cut=cut)
        with contextlib.closing(response), body.guard(), deadline.bounding():
            for chunk in response.iter_bytes():
                if not body.add(chunk):
                    break
        return body.data()

    async def aread(
        self, response: httpx.Response, deadline: Deadline, limit: int, *, cut: bool = False
    ) -> bytes:
        """Async ``read``."""
        body = _Body(self.base_url, deadline, limit, cut=cut)
        async with contextlib.aclosing(response):
            with body.guard(), deadline.bounding():
                async for chunk in response.aiter_bytes():
                    if not body.add(chunk):
                        break
        return body.data()

    def text(self, response: httpx.Response, deadline: Deadline) -> Iterator[str]:
        """The body of an open ``response`` as text, in the pieces it arrives in."""
        pieces = response.iter_text()
        while True:
            with deadline.bounding():  # not across the yield: the caller's code is not bounded
                piece = next(pieces, None)
            if piece is None:
                return
            deadline.check()
            yield piece

    async def atext(self, response: httpx.Response, deadline: Deadline) -> AsyncIterator[str]:
        """Async ``text``."""
        pieces = response.aiter_text()
        while True:
            with deadline.bounding():
                piece = await anext(pieces, None)
            if piece is None:
                return
            deadline.check()
            yield piece

    def post(self, path: str, body: dict[str, Any], deadline: Deadline) -> httpx.Response:
        """``send`` a POST of ``body``, naming the served model if ``body`` names none."""
        if "model" not in body:
            model = self.model if self.model is not None else self.served_model(deadline)
            body = {"model": model, **body}
        return self.send("POST", path, body, deadline)

    async def apost(
        self, client: httpx.AsyncClient, path: str, body: dict[str, Any], deadline: Deadline
    ) -> httpx.Response:
        """Async ``post``."""
        if "model" not in body:
            model = self.model if self.model is not None else await self.aserved_model(
                client, deadline
            )
            body = {"model": model, **body}
        return await self.asend(client, "POST", path, body, deadline)

    def served_model(self, deadline: Deadline) -> str:
        """Ask the server which model it serves (``GET /models``); keep it if none was given."""
        response = self.send("GET", "/models", None, deadline)
        return self._keep(first_model(self.read(response, deadline, MODELS_LIMIT_BYTES),
                                      self.base_url))

    async def aserved_model(self, client: httpx.AsyncClient, deadline: Deadline) -> str:
        """Async ``served_model``."""
        response = await self.asend(client, "GET", "/models", None, deadline)
        return self._keep(first_model(await self.aread(response, deadline, MODELS_LIMIT_BYTES),
                                      self.base_url))

    def _keep(self, served: str) -> str:
        if self.model is None:
            self.model = served
        return self.model

    def client(self) -> httpx.Client:
        """The pooled client, shared by all threads (``httpx.Client`` is thread-safe)."""
        with self._client_lock:
            if self._client is None:
                self._client = httpx.Client(**self._client_options(DeadlineTransport))
            return self._client

    @contextlib.asynccontextmanager
    async def aclient(self) -> AsyncIterator[httpx.AsyncClient]:
        """A client for one async call, closed after it: ``async with transport.aclient()``.

        An ``AsyncClient`` belongs to the event loop it first ran on; the next call may run on
        another. The CA certificates are loaded (once) in a worker thread, off the event loop.
        """
        if self._ssl is None:
            await asyncio.to_thread(self._ssl_context)
        async with httpx.AsyncClient(**self._client_options(AsyncDeadlineTransport)) as client:
            yield client

    def close(self) -> None:
        with self._client_lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    @property
    def closed(self) -> bool:
        """Whether no pooled connection is held."""
        return self._client is None

    def _ssl_context(self) -> ssl.SSLContext:
        with self._ssl_lock:
            # Loading the CA certificates is most of the cost of a new client (about 0.1 s):
            # the async calls, one client each, share one context.
            if self._ssl is None:
                self._ssl = httpx.create_ssl_context()
            return self._ssl

    def _client_options(
        self, network: type[DeadlineTransport] | type[AsyncDeadlineTransport]
    ) -> dict[str, Any]:
        """A client's options; its transport the given one, else ``network`` (the deadline's)."""
        ssl_context = self._ssl_context()
        transport = self._transport if self._transport is not None else network(ssl_context)
        return {
            "base_url": self.base_url, "headers": self._headers, "auth": self._auth,
            "timeout": self.timeout, "transport": transport, "verify": ssl_context,
        }


class _Attempts:
    """The retry policy of one request: what to send, whether to retry, how long to wait."""

    def __init__(self, transport: Transport, method: str, path: str, deadline: Deadline) -> None:
        self._transport = transport
        self._method = method
        self._path = path
        self._deadline = deadline
        self._attempt = 0

    def request(self, client: httpx.Client | httpx.AsyncClient, body: Any) -> httpx.Request:
        timeout = self._deadline.timeout(self._transport.timeout)
        return client.build_request(self._method, self._path, json=body, timeout=timeout)

    def accepts(self, response: httpx.Response) -> bool:
        """Whether ``response`` is the answer (2xx); any other is read, then given to ``wait``."""
        return response.is_success

    def wait(self, outcome: httpx.Response | httpx.TransportError, said: bytes) -> float:
        """Seconds to wait before trying again; raises when ``outcome`` is final.

        ``said``: the body of an answer that is not a completion (its start).
        """
        base_url = self._transport.base_url
        retries_left = self._attempt < self._transport.max_retries
        if isinstance(outcome, httpx.TransportError):
            if self._deadline.passed():
                raise self._deadline.error() from outcome
            if not (retries_left and _retryable(outcome)):
                raise connection_error(outcome, base_url, self._attempt) from outcome
            seconds = self._backoff()
        elif outcome.is_redirect:
            raise redirect_error(outcome, base_url)
        else:
            if not (retries_left and outcome.status_code in RETRY_STATUS):
                raise response_error(outcome, said, base_url, self._attempt)
            after = retry_after(outcome.headers.get("Retry-After"))
            seconds = self._backoff() if after is None else min(after, MAX_WAIT_S)
        self._attempt += 1
        return self._deadline.wait(seconds)

    def _backoff(self) -> float:
        delay: float = self._transport.retry_backoff * 2.0**self._attempt
        return min(delay * (0.75 + random.random() / 2), MAX_WAIT_S)


class _Body:
    """A body read whole, within a size limit and the deadline."""

    def __init__(self, base_url: str, deadline: Deadline, limit: int, *, cut: bool) -> None:
        self._base_url = base_url
        self._deadline = deadline
        self._limit = limit
        self._cut = cut
        self._chunks: list[bytes] = []
        self._size = 0

    @contextlib.contextmanager
    def guard(self) -> Iterator[None]:
        """A connection lost while reading becomes a ``ServerConnectionError``."""
        try:
            yield
        except httpx.TransportError as error:
            raise self._lost(error) from error
        except httpx.DecodingError as error:
            raise undecodable_body(error, self._base_url) from error

    def add(self, chunk: bytes) -> bool:
        """Keep ``chunk``; ``False`` once the limit is reached and the rest is not wanted."""
        self._deadline.check()
        if self._size + len(chunk) > self._limit:
            if self._cut:
                self._chunks.append(chunk[:self._limit - self._size])
                self._size = self._limit
                return False
            raise ServerResponseError(
                f"the server at {self._base_url} sent more than {self._limit} bytes, more than "
                "the answer asked for can take; the answer was not returned",
                status_code=200, body=b"".join(self._chunks)[:1000].decode(errors="replace"),
            )
        self._size += len(chunk)
        self._chunks.append(chunk)
        return True

    def data(self) -> bytes:
        return b"".join(self._chunks)

    def _lost(self, error: httpx.TransportError) -> ServerConnectionError:
        if self._deadline.passed():
            return self._deadline.error()
        return ServerConnectionError(
            f"the connection to {self._base_url} was lost while the answer arrived, after "
            f"{self._size} bytes ({type(error).__name__}: {error}); the answer is incomplete "
            "and was not returned"
        )


def retry_after(value: str | None) -> float | None:
    """The seconds a ``Retry-After`` header asks for (ASCII seconds or an HTTP date), if any."""
    if not value:
        return None
    value = value.strip()
    if _SECONDS.fullmatch(value):
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    return max(when.timestamp() - time.time(), 0.0)


def api_root(base_url: object) -> tuple[str, tuple[str, str] | None]:
    """The server's OpenAI-compatible root (``.../v1``) without user info, and that user info.

    Returns:
        The root, and the (user name, password) the URL held, or ``None``.
    """
    if not isinstance(base_url, str) or not base_url.strip():
        raise InvalidInputError(
            f"the server URL must be a non-empty string, got {redact(base_url)!r}; "
            "e.g. http://localhost:8080"
        )
    url = base_url.strip().rstrip("/")
    shown = redact(url)
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidInputError(
            f"{shown!r} is not an http(s) URL; give the server's address with its scheme, "
            "e.g. http://localhost:8080 or https://llm.example.com/v1"
        )
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        raise InvalidInputError(f"{shown!r} has a bad port; e.g. http://host:8080") from None
    credentials = None
    if parts.username is not None or parts.password is not None:
        credentials = (unquote(parts.username or ""), unquote(parts.password or ""))
    host = parts.netloc.rpartition("@")[2]
    root = urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))
    return (root if root.endswith("/v1") else f"{root}/v1"), credentials


def seconds_of(name: str, value: object, *, zero: bool = False) -> float:
    """``value`` if it is a finite number of seconds > 0 (>= 0 with ``zero``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputTypeError(f"{name} must be a number of seconds, got {value!r}")
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero):
        bound = ">= 0" if zero else "> 0"
        raise InvalidInputError(
            f"{name} must be a finite number of seconds {bound}, got {value!r}"
        )
    return float(value)


def check_deadline(value: object) -> float | None:
    """``deadline=``: ``None``, or a finite number of seconds > 0."""
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and not value > 0:
        raise InvalidInputError(
            f"deadline must be a number of seconds > 0, got {value!r}; pass None for no limit"
        )
    return seconds_of("deadline", value)


def _api_key_from_env() -> str | None:
    for name in API_KEY_VARIABLES:
        if value := os.environ.get(name, "").strip():
            return value
    return None


def _retryable(error: httpx.TransportError) -> bool:
    # Nothing was generated yet when the connection could not be made or was refused; a read
    # timeout may mean the server is generating, so sending again would only pile up work.
    return isinstance(error, (httpx.ConnectError, httpx.ConnectTimeout, httpx.RemoteProtocolError))
