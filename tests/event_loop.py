"""A server whose steering handshake takes seconds, how late the event loop's ticks run, and a
reader cancelled mid-stream.

The bound the event-loop tests hold to: while a coroutine waits on a slow server, another task
on the same loop ticks on time. ``HANDSHAKE_S`` is forty times ``MAX_TICK_DELAY_S``, so a
blocked loop cannot pass. A machine shared with other work may leave this process unscheduled
for a moment, which shows as a late tick too: ``least_tick_delay`` measures up to ``ATTEMPTS``
runs and keeps the best, which a loop that runs meets at once and a blocked loop never does (it
misses by the whole handshake every time).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx

from citeformer.decoding.payload import HANDSHAKE, PAYLOAD_KEY
from citeformer.testing import FakeServer

HANDSHAKE_S = 2.0
"""How long the slow server takes to answer the steering handshake."""
MAX_TICK_DELAY_S = 0.05
"""How late a tick may run while the handshake is awaited."""
TICK_S = 0.005
ATTEMPTS = 3

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


def least_tick_delay(
    attempt: Callable[[], Callable[[], Awaitable[object]]],
    check: Callable[[float, object], None],
) -> float:
    """The least of ``tick_delays`` over up to ``ATTEMPTS`` runs, stopping at one in bound.

    ``attempt()`` sets up one run (a fresh server and generator) and returns its work;
    ``check(took, result)`` asserts what each run must give whatever its ticks.
    """
    least = float("inf")
    for _ in range(ATTEMPTS):
        latest, took, result = tick_delays(attempt())
        check(took, result)
        least = min(least, latest)
        if least < MAX_TICK_DELAY_S:
            break
    return least


async def cancel_while_reading(chunks: AsyncIterator[object]) -> None:
    """Read ``chunks`` in a task and cancel it once the first has come, while the next is on
    its way; the task ends cancelled."""
    first = asyncio.Event()

    async def read() -> None:
        async for _ in chunks:
            first.set()

    task = asyncio.create_task(read())
    await first.wait()
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        return
    raise AssertionError("the reading task was not cancelled")
