"""What both framework wrappers must do, run against each (``tests.wrappers.frameworks``).

Refused inputs, abstained answers, a stream left early and a model that fails behave alike in
LangChain and LlamaIndex, asked in each of the four ways (whole or streamed, sync or async),
with an async generator (awaited) and a model in this process (run in a worker thread).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from citeformer.errors import InputTypeError
from citeformer.request import GenerationRequest
from citeformer.testing import FakeGenerator, FakeServer
from tests.event_loop import cancel_while_reading
from tests.wrappers.frameworks import FRAMEWORKS, HOWS, Framework, How, Traced

REFUSAL = "The sources do not answer this question."
TEXT = "Paris is the capital of France [1]. Berlin is in Germany [2]."
frameworks = pytest.mark.parametrize("framework", FRAMEWORKS, ids=lambda f: f.name)
hows = pytest.mark.parametrize("how", HOWS)
in_process_or_not = pytest.mark.parametrize("in_process", [False, True],
                                            ids=["awaited", "in-process"])


class OldStyleGenerator:
    """The generate/stream surface alone, without answer/answer_stream."""

    def generate(self, *args: Any) -> None: ...

    def stream(self, *args: Any) -> None: ...


class Failing:
    """A generator whose model fails, sync and async, whole and streamed."""

    def answer(self, request: GenerationRequest) -> Any:
        raise RuntimeError("the model ran out of memory")

    def answer_stream(self, request: GenerationRequest) -> Any:
        raise RuntimeError("the model ran out of memory")

    async def aanswer(self, request: GenerationRequest) -> Any:
        raise RuntimeError("the model ran out of memory")

    def aanswer_stream(self, request: GenerationRequest) -> Any:
        raise RuntimeError("the model ran out of memory")


def generators(in_process: bool) -> FakeGenerator | Any:
    fake = FakeGenerator(TEXT)
    return fake.sync_only() if in_process else fake


@frameworks
@pytest.mark.parametrize(
    ("value", "named"),
    [("SmolLM2", "'SmolLM2' of type str"), (OldStyleGenerator(), "of type OldStyleGenerator")],
)
def test_a_generator_without_answer_is_refused_at_construction(
    framework: Framework, value: Any, named: str
) -> None:
    # LangChain wraps the error in pydantic's ValidationError (a ValueError), LlamaIndex raises
    # it as it is; both name the value and what it lacks.
    with pytest.raises((InputTypeError, ValueError)) as caught:
        framework.build(value)
    assert named in str(caught.value)
    assert "has no answer() or answer_stream()" in str(caught.value)


@frameworks
@hows
@in_process_or_not
def test_an_answer_cites_only_the_passages_it_was_given(
    framework: Framework, how: How, in_process: bool
) -> None:
    answered = framework.ask(generators(in_process), how)
    assert answered.text == TEXT and answered.source_ids == [1, 2]
    assert not answered.abstained and answered.band == "answer"


@frameworks
@hows
def test_a_question_the_passages_do_not_answer_is_abstained_and_the_server_not_asked(
    framework: Framework, how: How
) -> None:
    server = FakeServer()
    answered = framework.ask(server.generator(), how, question="Population of Peru?")
    assert answered.text == REFUSAL and answered.abstained and answered.source_ids == []
    assert answered.band == "refuse" and server.requests == []


@frameworks
@hows
def test_refusal_none_answers_every_question(framework: Framework, how: How) -> None:
    server = FakeServer()
    answered = framework.ask(server.generator(), how, question="Population of Peru?",
                             refusal=None)
    assert not answered.abstained and answered.source_ids and answered.band is None
    assert len(server.bodies) == 1


@frameworks
@in_process_or_not
@pytest.mark.parametrize("leave", ["aclose", "cancel"])
def test_an_async_stream_left_early_stops_the_generation(
    framework: Framework, in_process: bool, leave: str
) -> None:
    fake = FakeGenerator(TEXT, piece_chars=2, delay=0.01)
    traced = Traced()

    async def read() -> None:
        chunks = framework.astream(fake.sync_only() if in_process else fake, traced=traced)
        if leave == "aclose":
            await anext(chunks)
            await anext(chunks)
            await chunks.aclose()  # type: ignore[attr-defined]
            return
        await cancel_while_reading(chunks)  # while the next chunk is on its way
        await chunks.aclose()  # type: ignore[attr-defined]

    asyncio.run(read())
    (stream,) = fake.streams
    assert stream.closed and not stream.finished  # type: ignore[union-attr]
    assert stream.generated < len(TEXT) // 2  # type: ignore[union-attr]
    # The model run ends as an error (the stream closed early, or the task's cancellation).
    (error,) = traced.errors
    assert isinstance(error, (GeneratorExit, asyncio.CancelledError))


@frameworks
def test_a_sync_stream_left_early_stops_the_generation(framework: Framework) -> None:
    fake = FakeGenerator(TEXT, piece_chars=2, delay=0.01)
    chunks: Any = framework.chunks(fake)
    next(chunks)
    chunks.close()
    (stream,) = fake.streams
    assert stream.closed and not stream.finished  # type: ignore[union-attr]


@frameworks
@hows
@in_process_or_not
def test_a_failing_model_raises_and_its_error_is_traced(
    framework: Framework, how: How, in_process: bool
) -> None:
    traced = Traced()
    failing: Any = Failing()
    if in_process:
        failing = FakeGenerator(TEXT).sync_only()
        failing.fake.answer = failing.fake.answer_stream = Failing().answer
    with pytest.raises(RuntimeError, match="out of memory"):
        framework.ask(failing, how, traced=traced)
    (error,) = traced.errors
    assert "out of memory" in str(error)
