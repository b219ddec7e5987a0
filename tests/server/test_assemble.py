"""From a completion body or its events to a checked CitedAnswer (server/_assemble.py and the
grammar re-check, server/_recheck.py): no server, no network."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from citeformer import (
    Policy,
    ServerIgnoredGrammarError,
    ServerResponseError,
    Source,
    build_request,
)
from citeformer.answers import ChunkTracker
from citeformer.server._assemble import (
    ANSWER_SLACK_BYTES,
    MAX_BYTES_PER_TOKEN,
    StreamAssembler,
    answer_limit,
    completed,
)
from citeformer.server._engines import ServerCall, prepare_call
from citeformer.server._recheck import (
    GRAMMAR_CACHE_SIZE,
    GrammarCheck,
    cached_grammars,
    compiled_grammar,
)
from citeformer.testing import chat_chunks
from tests.server.common import QUESTION, SOURCES

TOWER = [
    "The Eiffel Tower was completed in March 1889 and painted red-brown.",
    "Gustave Eiffel's company designed and built the tower in Paris.",
    "Honey bees communicate with a waggle dance.",
]


def call(
    policy: Policy = Policy.REQUIRED, engine: str = "llama.cpp", sources: Any = SOURCES,
    **options: Any,
) -> ServerCall:
    request = build_request(QUESTION, sources, policy, **options)
    return prepare_call(request, engine, "http://llm.test/v1", model="m", stream=False)


def body(text: Any, finish: Any = "stop", **extra: Any) -> bytes:
    choice = {"index": 0, "message": {"role": "assistant", "content": text},
              "finish_reason": finish}
    return json.dumps({"choices": [choice], **extra}).encode()


def streamed(server_call: ServerCall, pieces: list[str], finish: str = "stop") -> list[str]:
    assembler = StreamAssembler(server_call)
    shown = [chunk for event in chat_chunks(pieces, finish)
             if (chunk := assembler.feed(event)) is not None]
    answer, rest = assembler.finish()
    assert "".join(shown) + rest == answer.text
    return shown


# -- the grammar, re-parsed ------------------------------------------------------------------

REFUSED = [
    (Policy.REQUIRED, "Paris [[1] is ] the capital of France [1].", "stop"),
    (Policy.AUTO, "Paris [[1] is ] the capital of France [1].", "stop"),
    (Policy.REQUIRED, "See [this bracket span is longer than 24 chars] too [2].", "stop"),
    (Policy.AUTO, "See [this bracket span is longer than 24 chars] too [2].", "stop"),
    (Policy.REQUIRED, "Paris is [\n7] the capital [1].", "stop"),
    (Policy.AUTO, "Paris is [\n7] the capital [1].", "stop"),
    (Policy.REQUIRED, "Paris is the capital of France. Berlin is in Germany [2].", "stop"),
    (Policy.REQUIRED, "Paris is the capital of France", "stop"),  # it cannot end here
    (Policy.REQUIRED, "Paris is the capital of France. Berlin", "length"),  # nor go on so
    (Policy.AUTO, "Paris [1] [2].", "stop"),  # groups do not stack
]


@pytest.mark.parametrize(("policy", "text", "finish"), REFUSED)
def test_what_the_grammar_refuses_raises(policy: Policy, text: str, finish: str) -> None:
    with pytest.raises(ServerIgnoredGrammarError, match="ignored the citation grammar") as info:
        completed(call(policy), body(text, finish))
    assert "'grammar' field" in str(info.value)
    with pytest.raises(ServerIgnoredGrammarError):
        streamed(call(policy), [text[i:i + 3] for i in range(0, len(text), 3)], finish)


def test_a_fabricated_quote_cut_by_the_budget_raises() -> None:
    # Without the grammar the budget cut drops the quote and returns 'He said'.
    text = 'He said "the tower was painted gold in 1999" loudly and more'
    quotes = call(Policy.QUOTES_ONLY, sources=TOWER)
    with pytest.raises(ServerIgnoredGrammarError, match="ignored the citation grammar"):
        completed(quotes, body(text, "length"))
    shown: list[str] = []
    assembler = StreamAssembler(quotes)
    with pytest.raises(ServerIgnoredGrammarError):
        for event in chat_chunks(list(text), "length"):
            if (chunk := assembler.feed(event)) is not None:
                shown.append(chunk)
    assert "".join(shown) == "He said"


ACCEPTED = [
    (Policy.REQUIRED, "Paris is the capital of France [1]. Berlin is in Germany [2].", "stop",
     "Paris is the capital of France [1]. Berlin is in Germany [2]."),
    (Policy.REQUIRED, "Paris is the capital of France [1]. Berlin is in [", "length",
     "Paris is the capital of France [1]. Berlin is in"),
    (Policy.AUTO, "Paris is the capital of France.", "stop", "Paris is the capital of France."),
    (Policy.QUOTES_ONLY, 'It says "the capital of France" [1].', "stop",
     'It says "the capital of France" [1].'),
    (Policy.QUOTES_ONLY, 'It says "the capital of Fra', "length", "It says"),
]


@pytest.mark.parametrize(("policy", "text", "finish", "kept"), ACCEPTED)
def test_what_the_grammar_accepts_is_returned(
    policy: Policy, text: str, finish: str, kept: str
) -> None:
    answer = completed(call(policy), body(text, finish))
    assert answer.text == kept and answer.finish_reason == finish
    assert "".join(streamed(call(policy), list(text), finish)) + "" <= kept


@pytest.mark.parametrize(
    ("engine", "field"),
    [("llama.cpp", "'grammar'"), ("vllm", "'structured_outputs.grammar'"),
     ("vllm-guided", "'guided_grammar'"), ("sglang", "'ebnf'")],
)
def test_the_message_names_the_engines_grammar_field(engine: str, field: str) -> None:
    with pytest.raises(ServerIgnoredGrammarError) as info:
        completed(call(engine=engine), body("Paris is the capital. Berlin [2]."))
    message = str(info.value)
    assert f"{field} field" in message and f"engine={engine!r}" in message
    assert ("use engine='vllm'" in message) is (engine == "vllm-guided")


def test_unconstrained_answers_are_not_parsed() -> None:
    answer = completed(call(constrained=False), body("Paris [[1] is ] here [9]"))
    assert answer.text == "Paris [[1] is ] here [9]" and answer.cited_ids == [1]


def test_compiled_grammars_are_cached_by_text_and_bounded() -> None:
    grammar = call().grammar
    assert grammar is not None
    assert compiled_grammar(grammar) is compiled_grammar(grammar)
    for n in range(1, GRAMMAR_CACHE_SIZE + 5):
        compiled_grammar(call(sources=[f"Source {k}." for k in range(n)]).grammar or "")
    assert cached_grammars() == GRAMMAR_CACHE_SIZE


def test_a_refused_piece_names_its_first_refused_character() -> None:
    check = GrammarCheck(call().grammar or "")
    assert check.feed("Paris is ") is None
    assert check.feed("the [1]. x[7]") == 20  # "7", after "Paris is the [1]. x["
    assert check.matched == 9


def test_the_recheck_costs_little_per_answer() -> None:
    # Three sources of 600 characters; under QUOTES_ONLY their quotes are spelled in the grammar.
    sources = [" ".join(TOWER[(k + j) % 3] for j in range(12))[:600] for k in range(3)]
    answers = {
        Policy.REQUIRED: " ".join(
            ["The Eiffel Tower was completed in March 1889 and painted [1]."] * 8),
        Policy.QUOTES_ONLY: " ".join(
            ['It says "The Eiffel Tower was completed in March 1889" [1] and "designed and '
             'built the tower" [2].'] * 4),
    }
    for policy, text in answers.items():
        server_call = call(policy, sources=sources)
        started = time.perf_counter()
        completed(server_call, body(text))  # compiles the grammar, once
        first = time.perf_counter() - started
        unconstrained = call(policy, sources=sources, constrained=False)
        timings = {}
        for name, each in (("checked", server_call), ("unconstrained", unconstrained)):
            started = time.perf_counter()
            for _ in range(100):
                assert completed(each, body(text)).text == text
            timings[name] = (time.perf_counter() - started) / 100
        print(f"\n{policy.value}: grammar {len(server_call.grammar or '')} chars, first answer "
              f"{first * 1000:.1f} ms, then {timings['checked'] * 1000:.2f} ms an answer "
              f"({timings['unconstrained'] * 1000:.2f} ms unconstrained)")
        assert timings["checked"] < 0.02, timings  # a few tenths of a millisecond on a quiet CPU


# -- the size of an answer ---------------------------------------------------------------------


def test_an_answer_longer_than_max_new_tokens_can_produce_raises() -> None:
    small = call(Policy.AUTO, max_new_tokens=4)
    limit = answer_limit(small)
    assert limit == 4 * MAX_BYTES_PER_TOKEN + ANSWER_SLACK_BYTES
    fits = "a" * (limit - 4) + " [1]"
    assert completed(small, body(fits)).text == fits
    with pytest.raises(ServerResponseError, match=f"more than {limit} bytes.*max_new_tokens"):
        completed(small, body(fits + "a"))
    with pytest.raises(ServerResponseError, match="max_new_tokens"):
        streamed(small, ["a" * 1000] * (limit // 1000 + 1))
    with pytest.raises(ServerResponseError, match="max_new_tokens"):
        completed(call(Policy.AUTO, max_new_tokens=4, constrained=False), body("é" * limit))


# -- what a stream shows -----------------------------------------------------------------------

WORDS = st.sampled_from(["Paris", "is", "the", "capital", "of", "France", "été", "2.1"])
MARKERS = st.sampled_from(["[1]", "[2]", "[3]", "[1][3]", "[2][3]"])
QUOTES = st.sampled_from(['"the capital of France" [1]', '"capital of Germany"[2]',
                          '"Madrid is the capital" [3]'])


@st.composite
def answers(draw: st.DrawFn, quotes: bool) -> str:
    parts = []
    for _ in range(draw(st.integers(1, 8))):
        parts.append(" ".join(draw(st.lists(WORDS, min_size=1, max_size=4))))
        extra = draw(st.sampled_from(["", " ", "  ", "\n"]))
        kind = draw(st.sampled_from(["marker", "quote", "none"] if quotes else ["marker", "none"]))
        if kind == "marker":
            parts.append(extra + draw(MARKERS) + draw(st.sampled_from(["", ".", " "])))
        elif kind == "quote":
            parts.append(f" {draw(QUOTES)}" + draw(st.sampled_from(["", ". ", " "])))
        else:
            parts.append(extra)
    return "".join(parts)


@settings(max_examples=200, deadline=None)
@given(data=st.data(), quotes=st.booleans())
def test_a_stream_shows_what_safe_prefix_shows(data: st.DataObject, quotes: bool) -> None:
    text = data.draw(answers(quotes))
    cuts = sorted(set(data.draw(st.lists(st.integers(1, max(1, len(text) - 1)), max_size=12))))
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True) if a < b]
    policy = Policy.QUOTES_ONLY if quotes else Policy.AUTO
    server_call = call(policy)
    assert (server_call.request.quotable_chars is not None) is quotes
    tracker = ChunkTracker(quotes=quotes)
    assembler = StreamAssembler(server_call)
    so_far = ""
    for piece in pieces:
        so_far += piece
        expected = tracker.update(so_far)
        shown = assembler.feed({"choices": [{"index": 0, "delta": {"content": piece}}]})
        assert shown == expected, (pieces, so_far)


def test_many_small_events_take_linear_time() -> None:
    def seconds(events: int) -> float:
        server_call = call(Policy.AUTO, max_new_tokens=events)
        assembler = StreamAssembler(server_call)
        pieces = [" [1]" if k % 7 == 6 else " word" for k in range(events)]
        started = time.perf_counter()
        for piece in pieces:
            assembler.feed({"choices": [{"index": 0, "delta": {"content": piece}}]})
        assembler.feed({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
        assembler.finish()
        return time.perf_counter() - started

    seconds(1000)  # compiles the grammar
    small, large = min(seconds(16_000) for _ in range(2)), min(seconds(64_000) for _ in range(2))
    print(f"\n16,000 events: {small:.2f}s; 64,000 events: {large:.2f}s ({large / small:.1f}x)")
    # 4 times the events: about 4 times the time; a re-scan per event would take 16 times.
    assert large < 8 * small, (small, large)


# -- the answer's fields -----------------------------------------------------------------------


def test_a_source_list_of_one_and_a_text_completion() -> None:
    one = call(sources=[Source("Paris is the capital of France.")])
    text = {"choices": [{"index": 0, "text": "Paris is the capital [1].", "finish_reason": "eos"}],
            "usage": {"prompt_tokens": 12, "completion_tokens": 7}}
    answer = completed(one, json.dumps(text).encode())
    assert (answer.text, answer.finish_reason, answer.prompt_tokens, answer.generated_tokens) == (
        "Paris is the capital [1].", "stop", 12, 7
    )
