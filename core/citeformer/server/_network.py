"""Sockets whose every wait ends by the call's deadline.

httpx's ``timeout`` bounds each read, not a whole exchange: a server that answers
``102 Processing`` every second resets it for ever, and so does one that trickles a byte at a
time. The transport's connections are opened through these backends, which cut the timeout of
every connect, read and write to the time left until the end ``capped`` holds (a context
variable, so each thread and each task has its own). Past that end a wait raises httpx's
timeout, which ``Deadline`` turns into its message.
"""

from __future__ import annotations

import contextlib
import contextvars
import ssl
import time
from collections.abc import Iterable, Iterator
from typing import Any

import httpcore
import httpx

__all__ = ["AsyncDeadlineTransport", "DeadlineTransport", "capped"]

_END: contextvars.ContextVar[float | None] = contextvars.ContextVar("citeformer_end", default=None)
"""When the current call must end (``time.monotonic()``), ``None``: no end."""

_LEAST_S = 1e-3
"""A wait past the end still gets this long: a socket timeout of 0 would not block at all."""


@contextlib.contextmanager
def capped(end: float | None) -> Iterator[None]:
    """Within the block, no socket wait outlasts ``end`` (``time.monotonic()``; ``None``: none)."""
    token = _END.set(end)
    try:
        yield
    finally:
        _END.reset(token)


def _cut(timeout: float | None) -> float | None:
    end = _END.get()
    if end is None:
        return timeout
    left = max(end - time.monotonic(), _LEAST_S)
    return left if timeout is None else min(timeout, left)


class _Stream(httpcore.NetworkStream):
    def __init__(self, stream: httpcore.NetworkStream) -> None:
        self._stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, _cut(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _cut(timeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        return _Stream(self._stream.start_tls(ssl_context, server_hostname, _cut(timeout)))

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _Backend(httpcore.NetworkBackend):
    def __init__(self) -> None:
        self._backend = httpcore.SyncBackend()

    def connect_tcp(
        self, host: str, port: int, timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        return _Stream(self._backend.connect_tcp(
            host, port, _cut(timeout), local_address, socket_options))

    def connect_unix_socket(
        self, path: str, timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        return _Stream(self._backend.connect_unix_socket(path, _cut(timeout), socket_options))

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


class _AsyncStream(httpcore.AsyncNetworkStream):
    def __init__(self, stream: httpcore.AsyncNetworkStream) -> None:
        self._stream = stream

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self._stream.read(max_bytes, _cut(timeout))

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self._stream.write(buffer, _cut(timeout))

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        return _AsyncStream(
            await self._stream.start_tls(ssl_context, server_hostname, _cut(timeout)))

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _AsyncBackend(httpcore.AsyncNetworkBackend):
    def __init__(self) -> None:
        self._backend = httpcore.AnyIOBackend()

    async def connect_tcp(
        self, host: str, port: int, timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        return _AsyncStream(await self._backend.connect_tcp(
            host, port, _cut(timeout), local_address, socket_options))

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        return _AsyncStream(
            await self._backend.connect_unix_socket(path, _cut(timeout), socket_options))

    async def sleep(self, seconds: float) -> None:
        await self._backend.sleep(seconds)


def _pool_options(ssl_context: ssl.SSLContext) -> dict[str, Any]:
    # What httpx.HTTPTransport gives its pool by default (httpx/_transports/default.py).
    limits = httpx.Limits(max_connections=100, max_keepalive_connections=20, keepalive_expiry=5.0)
    return {
        "ssl_context": ssl_context, "max_connections": limits.max_connections,
        "max_keepalive_connections": limits.max_keepalive_connections,
        "keepalive_expiry": limits.keepalive_expiry, "http1": True, "http2": False,
    }


class DeadlineTransport(httpx.HTTPTransport):
    """httpx's transport, its connections opened through the deadline-capped backend.

    httpx keeps its connection pool in ``_pool`` and offers no way to pass a network backend:
    the pool is made again with one (``tests/server/test_hostile.py`` checks that it is used).
    """

    def __init__(self, ssl_context: ssl.SSLContext) -> None:
        super().__init__(verify=ssl_context)
        self._pool = httpcore.ConnectionPool(
            network_backend=_Backend(), **_pool_options(ssl_context))


class AsyncDeadlineTransport(httpx.AsyncHTTPTransport):
    """The async ``DeadlineTransport``."""

    def __init__(self, ssl_context: ssl.SSLContext) -> None:
        super().__init__(verify=ssl_context)
        self._pool = httpcore.AsyncConnectionPool(
            network_backend=_AsyncBackend(), **_pool_options(ssl_context))
