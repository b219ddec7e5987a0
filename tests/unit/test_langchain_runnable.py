"""CitationRunnable with a scripted generator: fast, offline. Each behaviour here is also run
against the embedded model in tests/integration/test_langchain_chain.py."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections.abc import Iterator, Sequence
from operator import itemgetter
from typing import Any

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.documents import Document
from langchain_core.runnables import (
    ConfigurableField,
    RunnableLambda,
    RunnablePassthrough,
)
from pydantic import ValidationError

from citeformer import CitedAnswer, Policy, Source, parse_citations
from citeformer.errors import (
    EmptyQuestionError,
    EmptySourceError,
    InvalidInputError,
    NoSourcesError,
)
from citeformer_langchain import (
    CitationAnswer,
    CitationAnswerChunk,
    CitationInput,
    CitationRunnable,
)

WORD = re.compile(r"[a-z]+")


class ScriptedGenerator:
    """CiteGenerator's generate/stream surface, answering with real CitedAnswer objects.

    The answer repeats the source sharing most words with the question and cites it, so each
    question gets a recognisably different answer; ``delay`` seconds pass per streamed piece.
    """

    def __init__(self, *, delay: float = 0.0) -> None:
        self.delay = delay
        self.calls: list[dict[str, Any]] = []
        self.active = 0
        self.most_active = 0
        self._count_lock = threading.Lock()

    def script(self, question: str, sources: Sequence[Source]) -> str:
        words = set(WORD.findall(question.lower()))
        best = max(
            range(len(sources)),
            key=lambda i: (len(words & set(WORD.findall(sources[i].text.lower()))), -i),
        )
        return f"{sources[best].text.rstrip('.')} [{best + 1}]."

    def pieces(self, text: str) -> list[str]:
        return re.findall(r"\s*\S+", text)

    def answer(self, text: str, sources: Sequence[Source], finish: str = "stop") -> CitedAnswer:
        return CitedAnswer(
            text=text,
            citations=tuple(parse_citations(text, len(sources))),
            sources=tuple(sources),
            finish_reason=finish,  # type: ignore[arg-type]
            prompt_tokens=100,
            generated_tokens=len(self.pieces(text)) + 1,
        )

    def _record(self, question: str, sources: Sequence[Source], policy: Any,
                **options: Any) -> None:
        self.calls.append({"question": question, "sources": list(sources), "policy": policy,
                           **options})

    def generate(self, question: str, sources: Sequence[Source],
                 policy: Policy | str = Policy.REQUIRED, **options: Any) -> CitedAnswer:
        self._record(question, sources, policy, **options)
        with self._count_lock:
            self.active += 1
            self.most_active = max(self.most_active, self.active)
        try:
            time.sleep(self.delay)
            return self.answer(self.script(question, sources), sources)
        finally:
            with self._count_lock:
                self.active -= 1

    def stream(self, question: str, sources: Sequence[Source],
               policy: Policy | str = Policy.REQUIRED, **options: Any) -> ScriptedStream:
        self._record(question, sources, policy, **options)
        text = self.script(question, sources)
        return ScriptedStream(self.pieces(text), self.answer(text, sources), self.delay)


class ScriptedStream:
    def __init__(self, pieces: list[str], answer: CitedAnswer, delay: float) -> None:
        self._pieces, self._answer, self._delay = pieces, answer, delay
        self.closed_early = False
        self.done = False

    @property
    def answer(self) -> CitedAnswer:
        assert self.done, "answer read before the stream ended"
        return self._answer

    def __iter__(self) -> Iterator[str]:
        try:
            for piece in self._pieces:
                time.sleep(self._delay)
                yield piece
            self.done = True
        except GeneratorExit:
            self.closed_early = True
            raise


class CutGenerator(ScriptedGenerator):
    """The token budget cut a marker open (``Paris is [1``): the core streams ``Paris is`` and
    answers ``Paris is``, with finish reason "length"."""

    def stream(self, question: str, sources: Sequence[Source], policy: Any = "required",
               **options: Any) -> ScriptedStream:
        answer = self.answer("Paris is", sources, finish="length")
        return ScriptedStream(["Paris", " is"], answer, 0.0)


DOCS = [
    Document(page_content="Paris is the capital of France.", metadata={"title": "France"}),
    Document(page_content="Berlin is the capital of Germany.", metadata={"source": "de.txt"}),
    Document(page_content="Madrid is the capital of Spain.", metadata={}),
]


@pytest.fixture
def gen() -> ScriptedGenerator:
    return ScriptedGenerator()


@pytest.fixture
def cite(gen: ScriptedGenerator) -> CitationRunnable:
    return CitationRunnable(generator=gen, max_new_tokens=48)


def ask(question: str, docs: list[Document] | None = None) -> dict[str, Any]:
    return {"question": question, "context": DOCS if docs is None else docs}


def assert_guarantee(answer: CitationAnswer, documents: list[Document]) -> None:
    assert answer.documents == documents
    for citation in answer.citations:
        assert 1 <= citation.source_id <= len(documents)
        assert citation.document is answer.documents[citation.source_id - 1]
        assert answer.text[citation.start:citation.end] == f"[{citation.source_id}]"


# --- invoke ---------------------------------------------------------------------------------

def test_invoke_cites_the_documents_passed(cite: CitationRunnable, gen: ScriptedGenerator) -> None:
    answer = cite.invoke(ask("What is the capital of Germany?"))
    assert isinstance(answer, CitationAnswer)
    assert answer.text == "Berlin is the capital of Germany [2]."
    assert [c.source_id for c in answer.citations] == [2]
    assert answer.citations[0].document is DOCS[1]
    assert answer.cited_documents == [DOCS[1]]
    assert answer.finish_reason == "stop"
    assert_guarantee(answer, DOCS)
    # Documents become Sources in order, titled from metadata title, else source.
    sources = gen.calls[0]["sources"]
    assert [s.text for s in sources] == [d.page_content for d in DOCS]
    assert [s.title for s in sources] == ["France", "de.txt", None]
    assert gen.calls[0]["max_new_tokens"] == 48 and gen.calls[0]["policy"] == "required"


def test_invoke_accepts_input_and_documents_keys(cite: CitationRunnable) -> None:
    answer = cite.invoke({"input": "capital of Spain?", "documents": DOCS, "chat_history": []})
    assert answer.citations[0].document is DOCS[2]


def test_question_key_wins_over_input_and_context_over_documents(cite: CitationRunnable) -> None:
    answer = cite.invoke({"question": "capital of Spain?", "input": "capital of France?",
                          "context": DOCS[2:], "documents": DOCS[:1]})
    assert answer.documents == DOCS[2:]
    assert answer.text.startswith("Madrid")


def test_per_call_options_override_fields(cite: CitationRunnable, gen: ScriptedGenerator) -> None:
    cite.invoke(ask("France?"), max_new_tokens=12, policy="AUTO", seed=3)
    assert gen.calls[-1]["max_new_tokens"] == 12
    assert gen.calls[-1]["policy"] == "auto"
    assert gen.calls[-1]["seed"] == 3
    cite.bind(instructions="Be brief.").invoke(ask("France?"))
    assert gen.calls[-1]["instructions"] == "Be brief."
    list(cite.stream(ask("France?"), grammar_options={"max_sentence_words": 9}))
    assert gen.calls[-1]["max_sentence_words"] == 9
    assert "grammar_options" not in gen.calls[-1]
    with pytest.raises(TypeError, match="unknown generation option"):
        cite.invoke(ask("France?"), max_tokens=12)
    with pytest.raises(ValidationError, match="max_new_tokens"):
        cite.invoke(ask("France?"), max_new_tokens=0)


def test_configurable_fields(gen: ScriptedGenerator) -> None:
    cite = CitationRunnable(generator=gen).configurable_fields(
        max_new_tokens=ConfigurableField(id="answer_tokens")
    )
    cite.invoke(ask("France?"), config={"configurable": {"answer_tokens": 7}})
    assert gen.calls[-1]["max_new_tokens"] == 7


def test_fields_are_checked() -> None:
    assert CitationRunnable(generator=ScriptedGenerator(), policy=Policy.AUTO).policy == "auto"
    assert CitationRunnable(generator=ScriptedGenerator(), policy="Quotes-Only").policy == (
        "quotes_only"
    )
    with pytest.raises(ValidationError, match="unknown citation policy"):
        CitationRunnable(generator=ScriptedGenerator(), policy="always")
    with pytest.raises(ValidationError, match="has no generate or stream"):
        CitationRunnable(generator="SmolLM2")
    with pytest.raises(ValidationError):
        CitationRunnable(generator=ScriptedGenerator(), max_new_tokens=0)


def test_no_generator_uses_the_embedded_default(monkeypatch: pytest.MonkeyPatch) -> None:
    import citeformer

    scripted = ScriptedGenerator()
    monkeypatch.setattr(citeformer.CiteGenerator, "default", classmethod(lambda cls: scripted))
    answer = CitationRunnable().invoke(ask("France?"))
    assert answer.citations[0].document is DOCS[0]
    assert len(scripted.calls) == 1


def test_output_converts_to_json(cite: CitationRunnable) -> None:
    data = json.loads(json.dumps(cite.invoke(ask("France?")).to_dict()))
    assert data["citations"] == [{"source_id": 1, "start": 31, "end": 34}]
    assert [d["source_id"] for d in data["documents"]] == [1, 2, 3]
    assert data["documents"][0]["metadata"] == {"title": "France"}
    assert data["finish_reason"] == "stop"


# --- schemas and composition ----------------------------------------------------------------

def test_schemas_describe_the_real_input_and_output(cite: CitationRunnable) -> None:
    assert cite.get_input_schema() is CitationInput
    properties = cite.get_input_jsonschema()["properties"]
    assert {"question", "input", "context", "documents"} <= set(properties)
    assert cite.get_output_schema() is CitationAnswer
    assert {"text", "citations", "documents"} <= set(cite.get_output_jsonschema()["properties"])
    assert cite.OutputType is CitationAnswer


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


def test_from_retriever(gen: ScriptedGenerator) -> None:
    chain = CitationRunnable.from_retriever(RunnableLambda(fake_retriever), generator=gen,
                                            policy="auto")
    answer = chain.invoke("Spain")
    assert answer.documents == [DOCS[2]] and answer.citations[0].source_id == 1
    assert gen.calls[-1]["policy"] == "auto"
    assert chain.get_output_schema() is CitationAnswer
    chunks = list(chain.stream("Spain"))
    assert len(chunks) > 1 and chunks[-1].citations


# --- batch ----------------------------------------------------------------------------------

QUESTIONS = ["capital of France?", "capital of Germany?", "capital of Spain?"]


def test_batch_gives_each_input_its_own_answer(cite: CitationRunnable,
                                               gen: ScriptedGenerator) -> None:
    gen.delay = 0.02
    answers = cite.batch([ask(q) for q in QUESTIONS], config={"max_concurrency": 3})
    assert [a.citations[0].document for a in answers] == DOCS
    assert [a.text for a in answers] == [cite.invoke(ask(q)).text for q in QUESTIONS]
    assert gen.most_active == 1  # one generation at a time


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


def test_abatch_gives_each_input_its_own_answer(cite: CitationRunnable,
                                                gen: ScriptedGenerator) -> None:
    gen.delay = 0.02
    answers = asyncio.run(cite.abatch([ask(q) for q in QUESTIONS]))
    assert [a.citations[0].document for a in answers] == DOCS
    assert gen.most_active == 1

    async def collect() -> list[tuple[int, Any]]:
        return [r async for r in cite.abatch_as_completed([ask(q) for q in QUESTIONS])]

    assert [a.citations[0].document for _, a in asyncio.run(collect())] == DOCS


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
    assert total.model_dump() == {**cite.invoke(ask("capital of Germany?")).model_dump()}
    assert_guarantee(total, DOCS)


def test_stream_text_adds_up_when_the_budget_cuts_a_marker() -> None:
    cite = CitationRunnable(generator=CutGenerator())
    chunks = list(cite.stream(ask("France?")))
    assert "".join(c.text for c in chunks) == "Paris is"
    assert chunks[-1].finish_reason == "length"


def test_leaving_a_stream_early_closes_the_generation(gen: ScriptedGenerator) -> None:
    streams: list[ScriptedStream] = []
    original = gen.stream

    def keep(*args: Any, **kwargs: Any) -> ScriptedStream:
        streams.append(original(*args, **kwargs))
        return streams[-1]

    gen.stream = keep  # type: ignore[method-assign]
    iterator = CitationRunnable(generator=gen).stream(ask("France?"))
    next(iterator)
    iterator.close()
    assert streams[0].closed_early


def test_astream_matches_stream(cite: CitationRunnable) -> None:
    async def collect() -> list[CitationAnswerChunk]:
        return [c async for c in cite.astream(ask("capital of Spain?"))]

    chunks = asyncio.run(collect())
    assert [c.text for c in chunks] == [c.text for c in cite.stream(ask("capital of Spain?"))]
    assert chunks[-1].citations[0].document is DOCS[2]


def test_astream_early_exit_closes_the_generation(gen: ScriptedGenerator) -> None:
    gen.delay = 0.01
    streams: list[ScriptedStream] = []
    original = gen.stream
    gen.stream = lambda *a, **k: streams.append(original(*a, **k)) or streams[-1]  # type: ignore

    async def first() -> None:
        iterator = CitationRunnable(generator=gen).astream(ask("France?"))
        await anext(iterator)
        await iterator.aclose()

    asyncio.run(first())
    assert streams[0].closed_early


def test_astream_events_v2(cite: CitationRunnable) -> None:
    async def collect() -> list[dict[str, Any]]:
        return [e async for e in cite.astream_events(
            ask("capital of France?"), version="v2",
            config={"run_name": "cited", "tags": ["t1"], "metadata": {"user": "u1"}})]

    events = asyncio.run(collect())
    kinds = [e["event"] for e in events]
    assert kinds[0] == "on_chain_start" and kinds[-1] == "on_chain_end"
    assert kinds.count("on_chain_stream") > 1
    assert {e["name"] for e in events} == {"cited"}
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


def test_ainvoke_does_not_block_the_event_loop(gen: ScriptedGenerator) -> None:
    gen.delay = 0.3
    cite = CitationRunnable(generator=gen)

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


# --- bad input ------------------------------------------------------------------------------

BAD_INPUTS: list[tuple[str, Any, type[Exception], str]] = [
    ("not a dict", "What is the capital?", TypeError, "takes a dict"),
    ("documents only", {"context": DOCS}, InvalidInputError, "no 'question' \\(or 'input'\\)"),
    ("question only", {"question": "Why?"}, InvalidInputError, "no 'context' \\(or 'documents'\\)"),
    ("empty documents", ask("Why?", []), NoSourcesError, "is an empty list"),
    ("context as str", {"question": "Why?", "context": "Paris."}, TypeError, "list of Documents"),
    ("context None", {"question": "Why?", "context": None}, TypeError, "got NoneType"),
    ("one Document", {"question": "Why?", "context": DOCS[0]}, TypeError, "list of Documents"),
    ("str item", ask("Why?", [DOCS[0], "Berlin."]), TypeError, "item 2 is a str"),
    ("dict item", ask("Why?", [{"page_content": "x"}]), TypeError, "item 1 is a dict"),
    ("empty page_content", ask("Why?", [DOCS[0], Document(page_content="")]), EmptySourceError,
     "document 2 \\(untitled\\) has empty page_content"),
    ("blank page_content", ask("Why?", [Document(page_content=" \n", metadata={"title": "T"})]),
     EmptySourceError, "document 1 \\(T\\)"),
    ("question int", ask(42), EmptyQuestionError, "must be the question as a str, got int"),  # type: ignore[arg-type]
    ("question None", {"input": None, "context": DOCS}, EmptyQuestionError, "got NoneType"),
    ("question blank", ask("  "), EmptyQuestionError, "is empty"),
]


@pytest.mark.parametrize(("value", "error", "message"),
                         [case[1:] for case in BAD_INPUTS], ids=[case[0] for case in BAD_INPUTS])
def test_bad_input_is_a_clear_error(cite: CitationRunnable, gen: ScriptedGenerator,
                                    value: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        cite.invoke(value)
    with pytest.raises(error, match=message):
        list(cite.stream(value))
    with pytest.raises(error, match=message):
        asyncio.run(cite.ainvoke(value))

    async def drain() -> None:
        async for _ in cite.astream(value):
            pass

    with pytest.raises(error, match=message):
        asyncio.run(drain())
    assert gen.calls == []  # rejected before any generation


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
    for name in ("generate", "stream"):  # the sync methods must not be used on async paths
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
    import threading as threading_

    from tests.fake_server import FakeServer

    server = FakeServer()
    seen: set[int] = set()
    answer = server.answer

    def respond(request: Any) -> Any:
        seen.add(threading_.get_ident())
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
