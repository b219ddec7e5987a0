"""CitationRunnable on citeformer.testing.FakeGenerator: fast, offline. Each behaviour here is also
run against the embedded model in tests/langchain/test_chain.py."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import json
import logging
import threading
import time
from operator import itemgetter
from typing import Any

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.documents import Document
from langchain_core.runnables import ConfigurableField, RunnableLambda, RunnablePassthrough
from pydantic import ValidationError

from citeformer import Policy
from citeformer.errors import InvalidInputError, NoSourcesError
from citeformer.evidence import LexicalEvidence
from citeformer.grammar import GrammarOptions
from citeformer.request import (
    DEFAULT_MAX_NEW_TOKENS,
    DEFAULT_POLICY,
    GENERATOR_DEFAULT,
    GenerationRequest,
    build_request,
)
from citeformer.testing import FakeGenerator
from citeformer_langchain import (
    CitationAnswer,
    CitationAnswerChunk,
    CitationInput,
    CitationRunnable,
)
from tests.langchain.common import (
    DOCS,
    WORD,
    answer_fields,
    ask,
    assert_guarantee,
    best_source,
)


@pytest.fixture
def gen() -> FakeGenerator:
    return FakeGenerator(best_source)


@pytest.fixture
def cite(gen: FakeGenerator) -> CitationRunnable:
    return CitationRunnable(generator=gen, max_new_tokens=48)


class Busy:
    """A script that takes ``seconds`` per answer and counts the answers written at once."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.active = 0
        self.most_active = 0
        self.threads: set[int] = set()
        self._lock = threading.Lock()

    def __call__(self, request: GenerationRequest) -> str:
        with self._lock:
            self.active += 1
            self.most_active = max(self.most_active, self.active)
            self.threads.add(threading.get_ident())
        try:
            time.sleep(self.seconds)
            return best_source(request)
        finally:
            with self._lock:
                self.active -= 1


def same_request(a: GenerationRequest, b: GenerationRequest) -> bool:
    # Two scorers built from one name are equal in all but identity.
    return repr(a.evidence) == repr(b.evidence) and (
        dataclasses.replace(a, evidence=None) == dataclasses.replace(b, evidence=None)
    )


# --- invoke ---------------------------------------------------------------------------------

def test_invoke_cites_the_documents_passed(cite: CitationRunnable, gen: FakeGenerator) -> None:
    answer = cite.invoke(ask("What is the capital of Germany?"))
    assert isinstance(answer, CitationAnswer)
    assert answer.text == "Berlin is the capital of Germany [2]."
    assert [c.source_id for c in answer.citations] == [2]
    assert answer.citations[0].document is DOCS[1]
    assert answer.cited_documents == [DOCS[1]]
    assert answer.finish_reason == "stop"
    assert_guarantee(answer, DOCS)
    # Documents become Sources in order, titled from metadata title, else source.
    (request,) = gen.requests
    assert [s.text for s in request.sources] == [d.page_content for d in DOCS]
    assert [s.title for s in request.sources] == ["France", "de.txt", None]
    assert request.max_new_tokens == 48 and request.policy is Policy.REQUIRED


def test_one_checked_request_per_call_reaches_the_generator(gen: FakeGenerator) -> None:
    cite = CitationRunnable(generator=gen, policy="auto", max_new_tokens=30, do_sample=True,
                            temperature=0.5, seed=7, instructions="Be brief [1].",
                            grammar_options={"max_group": 2})
    cite.invoke(ask("Spain?"))
    list(cite.stream(ask("Spain?")))
    asyncio.run(cite.ainvoke(ask("Spain?")))
    assert len(gen.requests) == 3
    expected = build_request(
        "Spain?", [s for s in gen.requests[0].sources], "auto", max_new_tokens=30,
        do_sample=True, temperature=0.5, seed=7, instructions="Be brief [1].", max_group=2,
    )
    for request in gen.requests:
        assert isinstance(request, GenerationRequest)
        assert same_request(request, expected)


def test_defaults_are_the_core_defaults(gen: FakeGenerator) -> None:
    cite = CitationRunnable(generator=gen)
    assert cite.max_new_tokens == DEFAULT_MAX_NEW_TOKENS
    assert cite.policy == DEFAULT_POLICY.value
    assert (cite.do_sample, cite.temperature) == (
        GenerationRequest.do_sample, GenerationRequest.temperature
    )
    cite.invoke(ask("France?"))
    (request,) = gen.requests
    assert same_request(request, build_request("France?", request.sources))
    assert request.grammar == GrammarOptions()


def test_invoke_accepts_input_and_documents_keys(cite: CitationRunnable) -> None:
    answer = cite.invoke({"input": "capital of Spain?", "documents": DOCS, "chat_history": []})
    assert answer.citations[0].document is DOCS[2]


def test_question_key_wins_over_input_and_context_over_documents(cite: CitationRunnable) -> None:
    answer = cite.invoke({"question": "capital of Spain?", "input": "capital of France?",
                          "context": DOCS[2:], "documents": DOCS[:1]})
    assert answer.documents == DOCS[2:]
    assert answer.text.startswith("Madrid")


def test_per_call_options_override_fields(cite: CitationRunnable, gen: FakeGenerator) -> None:
    cite.invoke(ask("France?"), max_new_tokens=12, policy="AUTO", seed=3)
    assert gen.requests[-1].max_new_tokens == 12
    assert gen.requests[-1].policy is Policy.AUTO
    assert gen.requests[-1].seed == 3
    cite.bind(instructions="Be brief.").invoke(ask("France?"))
    assert gen.requests[-1].instructions == "Be brief."
    list(cite.stream(ask("France?"), grammar_options={"max_sentence_words": 9}))
    assert gen.requests[-1].grammar == GrammarOptions(max_sentence_words=9)
    with pytest.raises(TypeError, match="unknown generation option"):
        cite.invoke(ask("France?"), max_tokens=12)
    # A per-call value is checked by that call's request, as the core checks it.
    with pytest.raises(InvalidInputError, match="max_new_tokens"):
        cite.invoke(ask("France?"), max_new_tokens=0)


def test_configurable_fields(gen: FakeGenerator) -> None:
    cite = CitationRunnable(generator=gen).configurable_fields(
        max_new_tokens=ConfigurableField(id="answer_tokens")
    )
    cite.invoke(ask("France?"), config={"configurable": {"answer_tokens": 7}})
    assert gen.requests[-1].max_new_tokens == 7


def test_fields_are_checked() -> None:
    assert CitationRunnable(generator=FakeGenerator(), policy=Policy.AUTO).policy == "auto"
    assert CitationRunnable(generator=FakeGenerator(), policy="Quotes-Only").policy == (
        "quotes_only"
    )
    with pytest.raises(ValidationError, match="unknown citation policy"):
        CitationRunnable(generator=FakeGenerator(), policy="always")
    with pytest.raises(ValidationError):
        CitationRunnable(generator=FakeGenerator(), max_new_tokens=0)
    with pytest.raises(ValidationError, match="unknown grammar option"):
        CitationRunnable(generator=FakeGenerator(), grammar_options={"max_words": 3})
    with pytest.raises(ValidationError, match="empty_sources"):
        CitationRunnable(generator=FakeGenerator(), empty_sources="skip")  # type: ignore[arg-type]


def test_no_generator_loads_the_embedded_default_on_first_use(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import citeformer

    scripted = FakeGenerator(best_source)
    loads: list[bool] = []

    def default(cls: Any) -> FakeGenerator:
        loads.append(True)
        return scripted

    monkeypatch.setattr(citeformer.CiteGenerator, "default", classmethod(default))
    cite = CitationRunnable()
    assert loads == []  # constructing it loads nothing
    answer = cite.invoke(ask("France?"))
    assert loads == [True]
    assert answer.citations[0].document is DOCS[0]
    assert len(scripted.requests) == 1


def test_output_converts_to_json(cite: CitationRunnable) -> None:
    answer = cite.invoke(ask("France?"))
    data = json.loads(json.dumps(answer.to_dict()))
    (citation,) = data["citations"]
    assert {k: citation[k] for k in ("source_id", "start", "end")} == {
        "source_id": 1, "start": 31, "end": 34,
    }
    # The span of the document that supports the claim, as the core writes it.
    assert citation["evidence"]["text"] == DOCS[0].page_content
    assert answer.citations[0].evidence is not None
    assert answer.citations[0].evidence.text == DOCS[0].page_content
    assert [d["source_id"] for d in data["documents"]] == [1, 2, 3]
    assert data["documents"][0]["metadata"] == {"title": "France"}
    assert data["finish_reason"] == "stop"


# --- evidence -------------------------------------------------------------------------------

def test_evidence_is_left_to_the_generator_unless_set(gen: FakeGenerator) -> None:
    CitationRunnable(generator=gen).invoke(ask("France?"))
    assert gen.requests[-1].evidence is GENERATOR_DEFAULT  # not passed: "lexical" locally
    CitationRunnable(generator=gen, evidence=None).invoke(ask("France?"))
    assert gen.requests[-1].evidence is None
    stronger = LexicalEvidence(weight=16.0)
    CitationRunnable(generator=gen, evidence=stronger).invoke(ask("France?"))
    assert gen.requests[-1].evidence is stronger
    CitationRunnable(generator=gen).invoke(ask("France?"), evidence=None)
    assert gen.requests[-1].evidence is None
    CitationRunnable(generator=gen, evidence=None).invoke(ask("France?"), evidence="default")
    assert gen.requests[-1].evidence is GENERATOR_DEFAULT
    with pytest.raises(ValidationError, match="unknown evidence scorer 'lex'"):
        CitationRunnable(generator=gen, evidence="lex")


def test_evidence_default_reaches_a_server_unasked() -> None:
    from tests.fake_server import FakeServer

    server = FakeServer()
    answer = CitationRunnable(generator=server.generator()).invoke(ask("Capitals?"))
    assert answer.citations
    with pytest.raises(InvalidInputError, match="evidence="):
        CitationRunnable(generator=server.generator(), evidence="lexical").invoke(ask("Capitals?"))


# --- schemas and composition ----------------------------------------------------------------

def test_schemas_describe_the_real_input_and_output(cite: CitationRunnable) -> None:
    assert cite.get_input_schema() is CitationInput
    properties = cite.get_input_jsonschema()["properties"]
    assert {"question", "input", "context", "documents"} <= set(properties)
    assert cite.get_output_schema() is CitationAnswer
    assert {"content", "citations", "documents"} <= set(cite.get_output_jsonschema()["properties"])
    assert cite.OutputType is CitationAnswer
    fields = CitationRunnable.model_json_schema()["properties"]
    assert "generator" not in fields
    assert {"evidence", "title_keys", "empty_sources"} <= set(fields)


def fake_retriever(query: str) -> list[Document]:
    return [d for d in DOCS if set(WORD.findall(query.lower())) & set(
        WORD.findall(d.page_content.lower()))] or DOCS


def test_drop_in_after_a_retriever(cite: CitationRunnable) -> None:
    retriever = RunnableLambda(fake_retriever)
    chain = {"context": retriever, "question": RunnablePassthrough()} | cite
    answer = chain.invoke("What is the capital of Spain?")
    assert answer.citations[0].document is DOCS[2]
    # The shape create_retrieval_chain builds: {"input": ..., "context": [...]}
    chain = RunnablePassthrough.assign(context=itemgetter("input") | retriever) | cite
    answer = chain.invoke({"input": "Germany"})
    assert answer.documents == [DOCS[1]]
    assert answer.citations[0].document is DOCS[1]


def test_from_retriever(gen: FakeGenerator) -> None:
    chain = CitationRunnable.from_retriever(RunnableLambda(fake_retriever), generator=gen,
                                            policy="auto")
    answer = chain.invoke("Spain")
    assert answer.documents == [DOCS[2]] and answer.citations[0].source_id == 1
    assert gen.requests[-1].policy is Policy.AUTO
    assert chain.get_output_schema() is CitationAnswer
    chunks = list(chain.stream("Spain"))
    assert len(chunks) > 1 and chunks[-1].citations


# --- batch ----------------------------------------------------------------------------------

QUESTIONS = ["capital of France?", "capital of Germany?", "capital of Spain?"]


def test_batch_gives_each_input_its_own_answer() -> None:
    # sync_only: a model in this process, whose answers are written one at a time.
    busy = Busy(0.02)
    cite = CitationRunnable(generator=FakeGenerator(busy).sync_only(), max_new_tokens=48)
    answers = cite.batch([ask(q) for q in QUESTIONS], config={"max_concurrency": 3})
    assert [a.citations[0].document for a in answers] == DOCS
    assert [a.text for a in answers] == [cite.invoke(ask(q)).text for q in QUESTIONS]
    assert busy.most_active == 1  # one generation at a time


def test_batch_return_exceptions(cite: CitationRunnable) -> None:
    out = cite.batch([ask("France?"), ask("France?", []), ask("Spain?")], return_exceptions=True)
    assert isinstance(out[0], CitationAnswer) and isinstance(out[2], CitationAnswer)
    assert isinstance(out[1], NoSourcesError)
    with pytest.raises(NoSourcesError):
        cite.batch([ask("France?"), ask("France?", [])])


def test_batch_as_completed_in_order(cite: CitationRunnable) -> None:
    results = list(cite.batch_as_completed([ask(q) for q in QUESTIONS]))
    assert [i for i, _ in results] == [0, 1, 2]
    assert [a.citations[0].document for _, a in results] == DOCS


def test_abatch_gives_each_input_its_own_answer() -> None:
    busy = Busy(0.02)
    cite = CitationRunnable(generator=FakeGenerator(busy).sync_only())
    answers = asyncio.run(cite.abatch([ask(q) for q in QUESTIONS]))
    assert [a.citations[0].document for a in answers] == DOCS
    assert busy.most_active == 1

    async def collect() -> list[tuple[int, Any]]:
        return [r async for r in cite.abatch_as_completed([ask(q) for q in QUESTIONS])]

    assert [a.citations[0].document for _, a in asyncio.run(collect())] == DOCS


def test_an_async_generator_answers_a_batch_side_by_side() -> None:
    fake = FakeGenerator(best_source, delay=0.01)
    awaited = fake.aanswer
    active = most_active = 0

    async def counting(request: GenerationRequest) -> Any:
        nonlocal active, most_active
        active += 1
        most_active = max(most_active, active)
        try:
            return await awaited(request)
        finally:
            active -= 1

    fake.aanswer = counting  # type: ignore[method-assign]
    cite = CitationRunnable(generator=fake)
    answers = asyncio.run(cite.abatch([ask(q) for q in QUESTIONS]))
    assert [a.citations[0].document for a in answers] == DOCS
    assert most_active == 3


# --- stream ---------------------------------------------------------------------------------

def test_stream_yields_text_then_citations(cite: CitationRunnable) -> None:
    chunks = list(cite.stream(ask("capital of Germany?")))
    assert all(isinstance(c, CitationAnswerChunk) for c in chunks)
    assert len(chunks) > 2
    assert all(c.text and not c.citations and c.finish_reason is None for c in chunks[:-1])
    last = chunks[-1]
    assert last.finish_reason == "stop" and last.documents == DOCS
    assert [c.document for c in last.citations] == [DOCS[1]]
    total = chunks[0]
    for chunk in chunks[1:]:
        total = total + chunk
    assert answer_fields(total) == answer_fields(cite.invoke(ask("capital of Germany?")))
    assert_guarantee(total, DOCS)


def test_stream_text_adds_up_when_the_budget_cuts_a_marker() -> None:
    # Cut after "Paris is [": the answer drops the open marker, as the core does.
    cite = CitationRunnable(generator=FakeGenerator("Paris is [1].", piece_chars=1, cut=10))
    chunks = list(cite.stream(ask("France?")))
    assert "".join(c.text for c in chunks) == "Paris is"
    assert chunks[-1].finish_reason == "length"
    assert chunks[-1].citations == []


def test_leaving_a_stream_early_closes_the_generation(gen: FakeGenerator) -> None:
    iterator = CitationRunnable(generator=gen).stream(ask("France?"))
    next(iterator)
    iterator.close()
    (stream,) = gen.streams
    assert stream.closed and not stream.finished


def test_astream_matches_stream(cite: CitationRunnable) -> None:
    async def collect() -> list[CitationAnswerChunk]:
        return [c async for c in cite.astream(ask("capital of Spain?"))]

    chunks = asyncio.run(collect())
    assert [c.text for c in chunks] == [c.text for c in cite.stream(ask("capital of Spain?"))]
    assert chunks[-1].citations[0].document is DOCS[2]


@pytest.mark.parametrize("in_process", [True, False], ids=["in-process", "async"])
def test_astream_early_exit_closes_the_generation(in_process: bool) -> None:
    fake = FakeGenerator(best_source, delay=0.01)
    cite = CitationRunnable(generator=fake.sync_only() if in_process else fake)

    async def first() -> None:
        iterator = cite.astream(ask("France?"))
        await anext(iterator)
        await iterator.aclose()

    asyncio.run(first())
    (stream,) = fake.streams
    assert stream.closed and not stream.finished


@pytest.mark.parametrize("in_process", [True, False], ids=["in-process", "async"])
@pytest.mark.parametrize("how", ["astream", "chain", "events"])
def test_breaking_out_of_astream_stops_cleanly(
    caplog: pytest.LogCaptureFixture, in_process: bool, how: str
) -> None:
    # `async for ...: break` leaves the stream to asyncio, which closes every unfinished async
    # generator at once when asyncio.run ends; any failure there is logged by "asyncio".
    fake = FakeGenerator(best_source, delay=0.01)
    generator = fake.sync_only() if in_process else fake
    chain = CitationRunnable.from_retriever(RunnableLambda(fake_retriever), generator=generator)

    async def leave_early() -> None:
        if how == "astream":
            async for _ in CitationRunnable(generator=generator).astream(ask("France?")):
                break
        elif how == "chain":
            async for _ in chain.astream("France?"):
                break
        else:
            async for event in chain.astream_events("France?", version="v2"):
                if event["event"] == "on_chain_stream" and event["name"] == "CitationRunnable":
                    break

    with caplog.at_level(logging.WARNING, logger="asyncio"):
        asyncio.run(leave_early())
        gc.collect()  # a task whose exception nobody read reports it when collected
    assert [r.getMessage() for r in caplog.records if r.name == "asyncio"] == []
    (stream,) = fake.streams
    assert stream.closed and not stream.finished
    assert stream.generated < len(best_source(fake.requests[0]).split())


def test_cancelling_astream_mid_chunk_stops_the_generation() -> None:
    # In process, the next chunk is being generated in a worker thread when the caller gives up.
    fake = FakeGenerator(best_source, delay=0.2)
    cite = CitationRunnable(generator=fake.sync_only())

    async def give_up() -> None:
        iterator = cite.astream(ask("France?"))
        await anext(iterator)
        waiting = asyncio.create_task(anext(iterator))  # type: ignore[arg-type]
        await asyncio.sleep(0.05)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting

    asyncio.run(give_up())
    (stream,) = fake.streams
    assert stream.closed and not stream.finished
    assert stream.generated == 2  # the piece being generated was finished, no more


def test_astream_events_v2(cite: CitationRunnable) -> None:
    async def collect() -> list[dict[str, Any]]:
        return [e async for e in cite.astream_events(
            ask("capital of France?"), version="v2",
            config={"run_name": "cited", "tags": ["t1"], "metadata": {"user": "u1"}})]

    events = asyncio.run(collect())
    kinds = [e["event"] for e in events]
    assert kinds[0] == "on_chain_start" and kinds[-1] == "on_chain_end"
    assert kinds.count("on_chain_stream") > 1
    # The step's run, and inside it the model's (tests/langchain/test_tracing.py).
    assert {e["name"] for e in events} == {"cited", "FakeGenerator"}
    assert all("t1" in e["tags"] and e["metadata"]["user"] == "u1" for e in events)
    streamed = [e["data"]["chunk"] for e in events if e["event"] == "on_chain_stream"]
    assert all(isinstance(c, CitationAnswerChunk) for c in streamed)
    output = events[-1]["data"]["output"]
    assert output.text == "".join(c.text for c in streamed)
    assert output.citations[0].document is DOCS[0]


def test_callbacks_see_start_end_and_errors(cite: CitationRunnable) -> None:
    class Recorder(BaseCallbackHandler):
        def __init__(self) -> None:
            self.seen: list[tuple[str, Any]] = []

        def on_chain_start(self, serialized: Any, inputs: Any, **kwargs: Any) -> None:
            self.seen.append(("start", kwargs.get("name")))

        def on_chain_end(self, outputs: Any, **kwargs: Any) -> None:
            self.seen.append(("end", outputs))

        def on_chain_error(self, error: BaseException, **kwargs: Any) -> None:
            self.seen.append(("error", error))

    recorder = Recorder()
    config = {"callbacks": [recorder], "run_name": "answer"}
    answer = cite.invoke(ask("France?"), config=config)
    assert recorder.seen == [("start", "answer"), ("end", answer)]
    recorder.seen.clear()
    list(cite.stream(ask("France?"), config=config))
    assert recorder.seen[0] == ("start", "answer") and recorder.seen[-1][0] == "end"
    assert recorder.seen[-1][1].citations
    recorder.seen.clear()
    with pytest.raises(NoSourcesError):
        cite.invoke(ask("France?", []), config=config)
    assert [kind for kind, _ in recorder.seen] == ["start", "error"]


@pytest.mark.parametrize("in_process", [True, False], ids=["in-process", "async"])
def test_ainvoke_does_not_block_the_event_loop(in_process: bool) -> None:
    fake = FakeGenerator(best_source, delay=0.05)
    cite = CitationRunnable(generator=fake.sync_only() if in_process else fake)

    async def run() -> tuple[CitationAnswer, int]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        task = asyncio.create_task(ticker())
        answer = await cite.ainvoke(ask("capital of Spain?"))
        task.cancel()
        return answer, ticks

    answer, ticks = asyncio.run(run())
    assert answer.citations[0].document is DOCS[2]
    assert ticks >= 10


def test_async_paths_await_an_async_generator_and_thread_an_in_process_one() -> None:
    fake = FakeGenerator(best_source)
    called: list[tuple[str, bool]] = []
    loop_thread = threading.get_ident()
    for name in ("answer", "answer_stream", "aanswer", "aanswer_stream"):
        original = getattr(fake, name)

        def spy(request: Any, _name: str = name, _original: Any = original) -> Any:
            called.append((_name, threading.get_ident() == loop_thread))
            return _original(request)

        setattr(fake, name, spy)

    async def both(cite: CitationRunnable) -> None:
        await cite.ainvoke(ask("France?"))
        _ = [chunk async for chunk in cite.astream(ask("France?"))]

    asyncio.run(both(CitationRunnable(generator=fake)))
    assert called == [("aanswer", True), ("aanswer_stream", True)]
    called.clear()
    asyncio.run(both(CitationRunnable(generator=fake.sync_only())))
    assert called == [("answer", False), ("answer_stream", False)]  # in worker threads


# --- a ServerGenerator (a scripted OpenAI-compatible server) --------------------------------


def test_server_generator_invoke_and_stream() -> None:
    from tests.fake_server import FakeServer

    server = FakeServer(pieces=["Paris is the capital of France [", "1", "].", " Berlin is",
                                " in Germany [", "2", "]."])
    cite = CitationRunnable(generator=server.generator(), max_new_tokens=32,
                            grammar_options={"max_sentence_words": 12})
    answer = cite.invoke(ask("Capitals?"))
    assert_guarantee(answer, DOCS)
    assert answer.text == "Paris is the capital of France [1]. Berlin is in Germany [2]."
    assert [c.document for c in answer.citations] == [DOCS[0], DOCS[1]]
    body = server.bodies[0]
    assert body["max_tokens"] == 32 and "max_sentence_words" not in body
    assert "{0,11}" in body["grammar"]  # the grammar option reached the grammar sent

    chunks = list(cite.stream(ask("Capitals?")))
    total = chunks[0]
    for chunk in chunks[1:]:
        total = total + chunk
    assert total.text == answer.text and total.citations == answer.citations
    assert all("[" not in c.text or "]" in c.text for c in chunks)


def test_server_generator_async_paths_await_the_server() -> None:
    from tests.fake_server import FakeServer

    server = FakeServer()
    generator = server.generator()
    called: list[str] = []
    for name in ("answer", "answer_stream"):  # the sync methods must not be used on async paths
        original = getattr(generator, name)

        def spy(*args: Any, _name: str = name, _original: Any = original, **kwargs: Any) -> Any:
            called.append(_name)
            return _original(*args, **kwargs)

        setattr(generator, name, spy)
    cite = CitationRunnable(generator=generator)

    async def run() -> tuple[CitationAnswer, list[CitationAnswerChunk]]:
        answer = await cite.ainvoke(ask("Capitals?"))
        chunks = [chunk async for chunk in cite.astream(ask("Capitals?"))]
        return answer, chunks

    answer, chunks = asyncio.run(run())
    assert called == []
    assert_guarantee(answer, DOCS)
    assert "".join(c.text for c in chunks) == answer.text
    assert chunks[-1].citations == answer.citations
    assert len(server.bodies) == 2 and server.bodies[1]["stream"] is True


def test_server_generator_errors_reach_the_caller() -> None:
    import httpx

    from citeformer import ServerConnectionError, ServerIgnoredGrammarError
    from tests.fake_server import FakeServer

    cite = CitationRunnable(generator=FakeServer(pieces=["Paris [7]."]).generator())
    with pytest.raises(ServerIgnoredGrammarError, match="'\\[7\\]'"):
        cite.invoke(ask("Capitals?"))
    with pytest.raises(ServerIgnoredGrammarError):
        list(cite.stream(ask("Capitals?")))

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused")

    cite = CitationRunnable(generator=FakeServer(respond=refuse).generator(max_retries=0))
    with pytest.raises(ServerConnectionError, match="could not reach"):
        asyncio.run(cite.ainvoke(ask("Capitals?")))


def test_server_generator_batches_side_by_side() -> None:
    from tests.fake_server import FakeServer

    server = FakeServer()
    seen: set[int] = set()
    answer = server.answer

    def respond(request: Any) -> Any:
        seen.add(threading.get_ident())
        time.sleep(0.05)
        return answer(request)

    server.respond = respond
    cite = CitationRunnable(generator=server.generator())
    questions = [ask(f"Capital {i}?") for i in range(4)]
    answers = cite.batch(questions)
    assert len(seen) > 1  # several requests in flight at once
    assert [a.text for a in answers] == [answers[0].text] * 4
    answers = asyncio.run(cite.abatch(questions))
    assert len(answers) == 4 and all(a.citations for a in answers)
    assert [json.loads(r.content)["messages"][-1]["content"].endswith(f"Capital {i}?")
            for i, r in enumerate(server.requests[-4:])] == [True] * 4


class BatchingFake:
    """A model in this process that decodes many requests at once, as CiteGenerator does."""

    def __init__(self) -> None:
        self.fake = FakeGenerator()
        self.batches: list[tuple[int, int]] = []  # (rows, batch_size) of each answer_batch call

    def answer(self, request: Any) -> Any:
        return self.fake.answer(request)

    def answer_stream(self, request: Any) -> Any:
        return self.fake.answer_stream(request)

    def answer_batch(self, requests: list[Any], *, batch_size: int = 8) -> list[Any]:
        self.batches.append((len(requests), batch_size))
        return [self.fake.answer(request) for request in requests]


def test_batch_with_a_local_model_decodes_the_inputs_together() -> None:
    fake = BatchingFake()
    cite = CitationRunnable(generator=fake, max_new_tokens=48)
    runs: list[str] = []

    class Runs(BaseCallbackHandler):
        def on_chain_end(self, outputs: Any, **kwargs: Any) -> None:
            if kwargs.get("parent_run_id") is None:
                runs.append(outputs.text)

    answers = cite.batch(
        [ask(q) for q in QUESTIONS], config={"max_concurrency": 2, "callbacks": [Runs()]}
    )
    assert fake.batches == [(3, 2)]  # one call; max_concurrency is the batch size
    assert [a.text for a in answers] == [cite.invoke(ask(q)).text for q in QUESTIONS]  # order
    assert runs == [a.text for a in answers]  # each input is still its own run


def test_batch_with_a_local_model_keeps_one_result_per_input() -> None:
    fake = BatchingFake()
    cite = CitationRunnable(generator=fake)
    out = cite.batch([ask("France?"), ask("France?", []), ask("Spain?")], return_exceptions=True)
    assert isinstance(out[0], CitationAnswer) and isinstance(out[2], CitationAnswer)
    assert isinstance(out[1], NoSourcesError)
    assert fake.batches == [(2, 8)]  # the bad input never reached the model
    answers = asyncio.run(cite.abatch([ask(q) for q in QUESTIONS]))
    assert fake.batches[-1] == (3, 8)
    assert [a.text for a in answers] == [cite.invoke(ask(q)).text for q in QUESTIONS]


# -- the output is a chat model's message: it composes as one does --------------------------------


def test_str_output_parser_ends_the_chain_with_the_text(cite: CitationRunnable) -> None:
    # Once a pydantic ValidationError (input_type=CitationAnswer).
    from langchain_core.output_parsers import StrOutputParser

    chain = {"context": RunnableLambda(fake_retriever), "question": RunnablePassthrough()} | cite
    answer = chain.invoke("What is the capital of Spain?")
    text = (chain | StrOutputParser()).invoke("What is the capital of Spain?")
    assert isinstance(text, str) and text == answer.text
    assert str(answer) == text and f"{answer}" == text
    streamed = list((chain | StrOutputParser()).stream("What is the capital of Spain?"))
    assert len(streamed) > 1 and "".join(streamed) == text


def test_the_answer_is_an_ai_message_with_usage_and_finish_reason(cite: CitationRunnable) -> None:
    from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage
    from langchain_core.messages.utils import message_chunk_to_message

    answer = cite.invoke(ask("capital of Germany?"))
    assert isinstance(answer, AIMessage) and answer.content == answer.text
    assert answer.response_metadata == {"finish_reason": "stop"}
    usage = answer.usage_metadata
    assert usage is not None and usage["input_tokens"] == answer.prompt_tokens > 0
    assert usage["output_tokens"] == answer.generated_tokens > 0
    assert usage["total_tokens"] == answer.prompt_tokens + answer.generated_tokens
    history = [HumanMessage("capital of Germany?"), answer]  # a chat history holds it as it is
    assert history[1].type == "ai"
    chunks = list(cite.stream(ask("capital of Germany?")))
    assert all(isinstance(chunk, AIMessageChunk) for chunk in chunks)
    total = chunks[0]
    for chunk in chunks[1:]:
        total = total + chunk
    whole = message_chunk_to_message(total)  # langchain-core's own chunk -> message
    assert isinstance(whole, CitationAnswer) and answer_fields(whole) == answer_fields(answer)
