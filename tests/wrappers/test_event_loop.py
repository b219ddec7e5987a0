"""Both wrappers' async paths leave the event loop free while a server is slow to answer."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from citeformer import ServerGenerator
from citeformer.testing import FakeServer
from tests.event_loop import (
    HANDSHAKE_S,
    MAX_TICK_DELAY_S,
    SlowHandshake,
    least_tick_delay,
    tick_delays,
)
from tests.wrappers.frameworks import FRAMEWORKS, QUESTION, TEXTS, Answered, Framework

TEXT = "Paris is the capital of France [1]. Berlin is in Germany [2]."


@pytest.mark.parametrize("framework", FRAMEWORKS, ids=lambda f: f.name)
@pytest.mark.parametrize("form", ["astream", "ainvoke"])
def test_a_slow_handshake_never_blocks_the_event_loop(framework: Framework, form: str) -> None:
    # A first answer imports what the wrapper and the answer's check need, and compiles the
    # grammar: the measured one then waits on the handshake alone.
    framework.ask(FakeServer(steering=True).generator(engine="vllm"), "ainvoke")

    def attempt() -> Any:
        server = SlowHandshake()
        gen = ServerGenerator("http://vllm.test/v1", "m", engine="vllm", transport=server)

        async def ask() -> tuple[Answered, int]:
            if form == "ainvoke":
                answered = await framework.aanswer(gen, QUESTION, TEXTS, None)
            else:
                answered = await framework.aread(framework.astream(gen))
            return answered, server.handshakes

        return ask

    def check(took: float, result: Any) -> None:
        answered, handshakes = result
        assert answered.text == TEXT and answered.source_ids == [1, 2] and handshakes == 1
        assert took >= HANDSHAKE_S  # the handshake was awaited while the ticks were measured

    latest = least_tick_delay(attempt, check)
    assert latest < MAX_TICK_DELAY_S, f"a tick ran {latest * 1000:.0f} ms late"


def test_the_loop_is_measured_blocked_when_it_is() -> None:
    # The measure itself: a coroutine that blocks its thread shows as a late tick.
    async def block() -> None:
        import time

        time.sleep(0.2)
        await asyncio.sleep(0)

    latest, _, _ = tick_delays(block)
    assert latest >= 0.15
