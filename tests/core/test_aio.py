"""``citeformer.generation.aio``: one async path over any generator, never blocking the loop."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from citeformer import ServerGenerator, build_request
from citeformer.errors import InputTypeError
from citeformer.integration import as_async
from citeformer.testing import FakeGenerator, FakeServer
from tests.event_loop import (
    HANDSHAKE_S,
    MAX_TICK_DELAY_S,
    QUESTION,
    SOURCES,
    SlowHandshake,
    cancel_while_reading,
    least_tick_delay,
)

TEXT = "Paris is the capital of France [1]. Berlin is in Germany [2]."


def request() -> Any:
    return build_request(QUESTION, SOURCES, max_new_tokens=64)


def test_an_async_generator_is_awaited_and_a_sync_one_runs_in_a_thread() -> None:
    fake = FakeGenerator(TEXT)
    assert as_async(fake).native and not as_async(fake.sync_only()).native
    for generator in (fake, fake.sync_only()):
        answer = asyncio.run(as_async(generator).answer(request()))
        assert answer.text == TEXT and [c.source_id for c in answer.citations] == [1, 2]


def test_as_async_of_an_adapter_is_that_adapter() -> None:
    answering = as_async(FakeGenerator(TEXT))
    assert as_async(answering) is answering  # type: ignore[arg-type]


def test_as_async_refuses_what_is_no_generator_naming_it() -> None:
    with pytest.raises(InputTypeError, match="got str 'gpt-4'"):
        as_async("gpt-4")  # type: ignore[arg-type]


@pytest.mark.parametrize("in_process", [False, True])
def test_a_stream_read_to_the_end_joins_to_its_answer(in_process: bool) -> None:
    fake = FakeGenerator(TEXT)

    async def read() -> tuple[list[str], Any]:
        stream = await as_async(fake.sync_only() if in_process else fake).stream(request())
        chunks = [chunk async for chunk in stream]
        return chunks, stream.answer

    chunks, answer = asyncio.run(read())
    assert len(chunks) > 1 and "".join(chunks) == answer.text == TEXT
    assert fake.streams[-1].finished  # type: ignore[union-attr]


@pytest.mark.parametrize("in_process", [False, True])
def test_leaving_a_stream_early_stops_the_generation(in_process: bool) -> None:
    fake = FakeGenerator(TEXT, delay=0.01)

    async def leave() -> None:
        stream = await as_async(fake.sync_only() if in_process else fake).stream(request())
        await anext(stream)
        await stream.aclose()
        await stream.aclose()  # closing again does nothing
        assert [chunk async for chunk in stream] == []

    asyncio.run(leave())
    (stream,) = fake.streams
    assert stream.closed and not stream.finished and stream.generated < 5  # type: ignore[union-attr]


def test_an_in_process_stream_runs_no_further_ahead_than_it_is_read() -> None:
    fake = FakeGenerator(TEXT)

    async def read_two() -> int:
        stream = await as_async(fake.sync_only()).stream(request())
        await anext(stream)
        await anext(stream)
        await asyncio.sleep(0.05)  # time enough to run ahead, were it free to
        generated = fake.streams[0].generated  # type: ignore[union-attr]
        await stream.aclose()
        return generated

    assert asyncio.run(read_two()) == 2


def test_a_cancelled_reader_stops_an_in_process_stream() -> None:
    fake = FakeGenerator(TEXT, delay=0.02)

    async def cancel() -> None:
        stream = await as_async(fake.sync_only()).stream(request())
        await cancel_while_reading(stream)  # while the next chunk is being generated
        await stream.aclose()

    asyncio.run(cancel())
    (stream,) = fake.streams
    assert stream.closed and not stream.finished  # type: ignore[union-attr]


def test_an_error_of_the_request_found_by_the_generator_is_raised_on_opening() -> None:
    server = FakeServer()
    gen = server.generator()  # llama.cpp: unsteered, so evidence= cannot be honoured
    bad = build_request(QUESTION, SOURCES, evidence="lexical")
    with pytest.raises(ValueError, match="evidence= reweights"):
        asyncio.run(as_async(gen).stream(bad))
    assert server.bodies == []


def _warm(server: FakeServer) -> None:
    # The first answer imports xgrammar and compiles the grammar the answer is checked against:
    # done once, before the measured calls, which then wait on the handshake alone.
    asyncio.run(server.generator(engine="vllm").aanswer(request()))


@pytest.mark.parametrize("form", ["astream", "aanswer_stream", "aanswer", "as_async"])
def test_a_slow_handshake_never_blocks_the_event_loop(form: str) -> None:
    _warm(FakeServer(steering=True))

    def attempt() -> Any:
        server = SlowHandshake()
        gen = ServerGenerator("http://vllm.test/v1", "m", engine="vllm", transport=server)

        async def ask() -> tuple[str, int]:
            if form == "aanswer":
                return (await gen.aanswer(request())).text, server.handshakes
            if form == "as_async":
                stream: Any = await as_async(gen).stream(request())
            elif form == "astream":
                stream = gen.astream(QUESTION, SOURCES, max_new_tokens=64)
            else:
                stream = gen.aanswer_stream(request())
            return "".join([chunk async for chunk in stream]), server.handshakes

        return ask

    def check(took: float, result: Any) -> None:
        assert result == (TEXT, 1)
        assert took >= HANDSHAKE_S  # the handshake was awaited while the ticks were measured

    latest = least_tick_delay(attempt, check)
    assert latest < MAX_TICK_DELAY_S, f"a tick ran {latest * 1000:.0f} ms late"


def test_a_steering_setting_the_server_refutes_raises_on_the_first_chunk() -> None:
    gen = FakeServer().generator(engine="vllm", steering=True)

    async def read() -> None:
        stream = gen.aanswer_stream(request())  # the server is not asked yet
        async for _ in stream:
            pass

    with pytest.raises(ValueError, match="does not run citeformer's steering processor"):
        asyncio.run(read())
