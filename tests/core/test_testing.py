"""citeformer.testing.FakeGenerator: scripted answers, checked like real ones; offline."""

from __future__ import annotations

import asyncio
import time

import pytest

from citeformer import AnswerGenerator, AsyncAnswerGenerator, build_request
from citeformer.errors import (
    GrammarViolationError,
    InputTypeError,
    InvalidInputError,
    PromptTooLongError,
)
from citeformer.testing import FakeGenerator

SOURCES = ["Paris is the capital of France.", "Berlin is the capital of Germany."]


def request(question: str = "What is the capital of France?", **options: object):
    return build_request(question, SOURCES, **options)  # type: ignore[arg-type]


def test_default_script_cites_source_one_with_the_question_words() -> None:
    answer = FakeGenerator().answer(request())
    assert answer.text == "What is the capital of France [1]."
    assert [c.source_id for c in answer.citations] == [1]
    assert answer.finish_reason == "stop"
    assert answer.generated_tokens == 8  # 7 words and the end-of-sequence token
    assert answer.prompt_tokens > 0


def test_scripts_fixed_list_and_callable() -> None:
    assert FakeGenerator("It is Paris [1].").answer(request()).text == "It is Paris [1]."
    fake = FakeGenerator(["One [1].", "Two [2]."])
    assert [fake.answer(request()).text for _ in range(3)] == ["One [1].", "Two [2].", "One [1]."]
    last = FakeGenerator(lambda r: f"Last [{r.n_sources}].")
    assert last.answer(request()).text == "Last [2]."


def test_records_every_request() -> None:
    fake = FakeGenerator()
    first, second = request(max_new_tokens=9), request("Germany?")
    fake.answer(first)
    list(fake.answer_stream(second))
    assert fake.requests == [first, second]


def test_answers_are_checked_like_real_ones() -> None:
    with pytest.raises(GrammarViolationError, match="'\\[7\\]'"):
        FakeGenerator("Paris [7].").answer(request())
    with pytest.raises(GrammarViolationError):
        list(FakeGenerator("Paris [7].").answer_stream(request()))


def test_streams_show_markers_whole_and_join_to_the_answer() -> None:
    fake = FakeGenerator("Paris is in France [1]. Berlin [2].", piece_chars=2)
    stream = fake.answer_stream(request())
    chunks = list(stream)
    assert "".join(chunks) == stream.answer.text == "Paris is in France [1]. Berlin [2]."
    assert all(c.count("[") == c.count("]") for c in chunks)
    assert stream.finished and stream.closed and stream.generated == 18


def test_budget_and_cut_end_with_length_and_drop_an_open_marker() -> None:
    cut = FakeGenerator("Paris is [1].", piece_chars=1, cut=10).answer(request())
    assert (cut.text, cut.finish_reason, cut.generated_tokens) == ("Paris is", "length", 10)
    budget = FakeGenerator("a b c d [1].").answer(request(max_new_tokens=3))
    assert (budget.text, budget.finish_reason) == ("a b c", "length")
    exact = FakeGenerator("a b [1].").answer(request(max_new_tokens=3))
    assert exact.finish_reason == "length"  # no room left for the end-of-sequence token


def test_leaving_a_stream_early_stops_it() -> None:
    fake = FakeGenerator("a b c d e [1].")
    chunks = iter(fake.answer_stream(request()))
    next(chunks)
    chunks.close()  # type: ignore[attr-defined]
    (stream,) = fake.streams
    assert stream.closed and not stream.finished and stream.generated < 6


def test_async_twins_and_delay() -> None:
    fake = FakeGenerator("a b [1].", delay=0.02)

    async def run() -> tuple[str, list[str], int]:
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.005)
                ticks += 1

        ticker = asyncio.create_task(tick())
        answer = await fake.aanswer(request())
        stream = fake.aanswer_stream(request())
        chunks = [c async for c in stream]
        ticker.cancel()
        return answer.text, chunks, ticks

    text, chunks, ticks = asyncio.run(run())
    assert text == "".join(chunks) == "a b [1]."
    assert ticks >= 5  # the delay was awaited, not slept
    started = time.perf_counter()
    fake.answer(request())
    assert time.perf_counter() - started >= 0.06


def test_is_both_kinds_of_generator_and_sync_only_is_one() -> None:
    fake = FakeGenerator()
    assert isinstance(fake, AsyncAnswerGenerator)
    sync = fake.sync_only()
    assert isinstance(sync, AnswerGenerator) and not isinstance(sync, AsyncAnswerGenerator)
    sync.answer(request())
    assert len(fake.requests) == 1


def test_context_length_refuses_a_long_prompt() -> None:
    with pytest.raises(PromptTooLongError, match="context holds 50"):
        FakeGenerator(context_length=50).answer(request())


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"script": 3}, InputTypeError, "got int"),
        ({"script": []}, InvalidInputError, "empty list"),
        ({"script": ["a [1].", 2]}, InputTypeError, "of type int"),
        ({"piece_chars": 0}, InvalidInputError, "piece_chars must be an int >= 1"),
        ({"cut": -1}, InvalidInputError, "cut must be an int >= 0"),
        ({"delay": -1}, InvalidInputError, "delay must be"),
    ],
)
def test_bad_arguments_are_clear_errors(kwargs: dict, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        FakeGenerator(**kwargs)
