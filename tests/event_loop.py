"""A server whose steering handshake takes seconds, and how late the event loop's ticks run.

The bound the event-loop tests hold to: while a coroutine waits on a slow server, another task
on the same loop ticks on time. ``HANDSHAKE_S`` is forty times ``MAX_TICK_DELAY_S``, so a
blocked loop cannot pass and a busy machine's scheduling noise does not fail a loop that runs.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from citeformer.decoding.payload import HANDSHAKE, PAYLOAD_KEY
from citeformer.testing import FakeServer

HANDSHAKE_S = 2.0
"""How long the slow server takes to answer the steering handshake."""
MAX_TICK_DELAY_S = 0.05
"""How late a tick may run while the handshake is awaited."""
TICK_S = 0.005

QUESTION = "What is the capital of France?"
SOURCES = ["Paris is the capital of France.", "Berlin is in Germany."]


class SlowHandshake(FakeServer):
    """A vLLM running citeformer's processor that takes ``HANDSHAKE_S`` to answer a handshake,
    sync (sleeping its thread) or async (awaiting)."""

    def __init__(self) -> None:
        super().__init__(steering=True)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if _is_handshake(request.read()):
            time.sleep(HANDSHAKE_S)
        return super().handle_request(request)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if _is_handshake(await request.aread()):
            await asyncio.sleep(HANDSHAKE_S)
        return await super().handle_async_request(request)


def _is_handshake(content: bytes) -> bool:
    if not content:
        return False
    body: Any = json.loads(content)
    return (body.get("vllm_xargs") or {}).get(PAYLOAD_KEY) == HANDSHAKE


def tick_delays(work: Callable[[], Awaitable[object]]) -> tuple[float, float, object]:
    """Run ``work()`` beside a task ticking every ``TICK_S``, on one new event loop.

    Returns the latest a tick ran past its time, the seconds ``work`` took, and its result.
    """

    async def run() -> tuple[float, float, object]:
        done = asyncio.Event()
        latest = 0.0

        async def tick() -> None:
            nonlocal latest
            while not done.is_set():
                before = time.perf_counter()
                await asyncio.sleep(TICK_S)
                latest = max(latest, time.perf_counter() - before - TICK_S)

        ticker = asyncio.create_task(tick())
        await asyncio.sleep(TICK_S)  # the ticker is running before the work starts
        start = time.perf_counter()
        try:
            result = await work()
        finally:
            took = time.perf_counter() - start
            done.set()
            await ticker
        return latest, took, result

    return asyncio.run(run())
