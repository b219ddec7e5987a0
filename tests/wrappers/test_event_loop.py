"""Both wrappers' async paths leave the event loop free while a server is slow to answer."""

from __future__ import annotations

import asyncio

import pytest

from citeformer import ServerGenerator
from citeformer.testing import FakeServer
from tests.event_loop import HANDSHAKE_S, MAX_TICK_DELAY_S, SlowHandshake, tick_delays
from tests.wrappers.frameworks import FRAMEWORKS, Framework

TEXT = "Paris is the capital of France [1]. Berlin is in Germany [2]."


@pytest.mark.parametrize("framework", FRAMEWORKS, ids=lambda f: f.name)
@pytest.mark.parametrize("form", ["astream", "aanswer"])
def test_a_slow_handshake_never_blocks_the_event_loop(framework: Framework, form: str) -> None:
    # A first answer imports what the wrapper and the answer's check need, and compiles the
    # grammar: the measured one then waits on the handshake alone.
    asyncio.run(framework.aanswer(FakeServer(steering=True).generator(engine="vllm")))
    server = SlowHandshake()
    gen = ServerGenerator("http://vllm.test/v1", "m", engine="vllm", transport=server)

    async def ask() -> str:
        if form == "aanswer":
            return await framework.aanswer(gen)
        return "".join([chunk async for chunk in framework.astream(gen)])

    latest, took, text = tick_delays(ask)
    assert text == TEXT and server.handshakes == 1
    assert took >= HANDSHAKE_S  # the handshake was awaited while the ticks were measured
    assert latest < MAX_TICK_DELAY_S, f"a tick ran {latest * 1000:.0f} ms late"
