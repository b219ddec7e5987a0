"""CitationRunnable end to end: the embedded SmolLM2-135M, real MiniLM embeddings, a real
InMemoryVectorStore retriever over real text. Offline; 1-3 minutes on two busy CPU cores.
The same behaviours run on a FakeGenerator in tests/langchain/test_runnable.py."""

from __future__ import annotations

import asyncio
import gc
import logging
import math
import time
from collections.abc import Iterator
from operator import itemgetter
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.runnables import RunnablePassthrough
from langchain_core.vectorstores import InMemoryVectorStore

from citeformer import CiteGenerator
from citeformer.errors import EmptyQuestionError, EmptySourceError, NoSourcesError
from citeformer_langchain import (
    CitationAnswer,
    CitationAnswerChunk,
    CitationRunnable,
    MiniLMEmbeddings,
    render_markdown,
)

pytestmark = pytest.mark.integration

TOKENS = 48

TEXTS = {
    "Eiffel Tower": "The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in "
    "Paris. It was built from 1887 to 1889 as the entrance arch of the 1889 World's Fair.",
    "Great Wall of China": "The Great Wall of China is a series of fortifications built across "
    "the historical northern borders of ancient Chinese states to protect against nomadic "
    "groups from the Eurasian Steppe.",
    "Photosynthesis": "Photosynthesis is the process by which plants use sunlight, water and "
    "carbon dioxide to make glucose and release oxygen.",
    "Mount Everest": "Mount Everest, in the Himalayas on the border of Nepal and China, is "
    "Earth's highest mountain above sea level, at 8,849 metres.",
    "Python": "Python is a high-level programming language created by Guido van Rossum and "
    "first released in 1991. Its design emphasises code readability.",
    "Honey bees": "Honey bees live in colonies with a single queen, thousands of female worker "
    "bees and a few hundred male drones. Workers collect nectar to make honey.",
}
EIFFEL = "When was the Eiffel Tower built?"
EVEREST = "How high is Mount Everest?"


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread() -> Iterator[None]:
    # On two cores shared with other processes, torch's spinning worker threads make a
    # generation several times slower than one thread does (measured: 55 s against 9 s).
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def retriever() -> Any:
    store = InMemoryVectorStore(MiniLMEmbeddings())
    store.add_documents([
        Document(page_content=text, metadata={"title": title, "source": f"{title.lower()}.txt"})
        for title, text in TEXTS.items()
    ])
    return store.as_retriever(search_kwargs={"k": 3})


@pytest.fixture(scope="module")
def cite(default_generator: CiteGenerator) -> CitationRunnable:
    # default_generator (tests/conftest.py) is the embedded model, shared by the whole run.
    return CitationRunnable(generator=default_generator, max_new_tokens=TOKENS)


@pytest.fixture(scope="module")
def chain(retriever: Any, default_generator: CiteGenerator) -> Any:
    return CitationRunnable.from_retriever(
        retriever, generator=default_generator, max_new_tokens=TOKENS
    )


@pytest.fixture(scope="module")
def eiffel(chain: Any) -> CitationAnswer:
    return chain.invoke(EIFFEL)


@pytest.fixture(scope="module")
def everest(cite: CitationRunnable, retriever: Any) -> CitationAnswer:
    return cite.invoke({"question": EVEREST, "context": retriever.invoke(EVEREST)})


def assert_guarantee(answer: CitationAnswer, documents: list[Document]) -> None:
    assert answer.documents == documents
    assert answer.finish_reason in ("stop", "length")
    for citation in answer.citations:
        assert 1 <= citation.source_id <= len(documents)
        assert citation.document is answer.documents[citation.source_id - 1]
        assert answer.text[citation.start:citation.end] == f"[{citation.source_id}]"


def test_minilm_embeddings_retrieve_the_relevant_document(retriever: Any) -> None:
    vector = MiniLMEmbeddings().embed_query(EVEREST)
    assert len(vector) == 384 and math.isclose(sum(v * v for v in vector), 1.0, rel_tol=1e-4)
    assert len(MiniLMEmbeddings().embed_documents(["a", "b"])) == 2
    assert retriever.invoke(EIFFEL)[0].metadata["title"] == "Eiffel Tower"
    assert retriever.invoke(EVEREST)[0].metadata["title"] == "Mount Everest"


def test_from_retriever_answers_with_citations_to_the_retrieved_documents(
    eiffel: CitationAnswer, retriever: Any
) -> None:
    documents = retriever.invoke(EIFFEL)
    assert_guarantee(eiffel, documents)
    assert eiffel.text.strip() and eiffel.citations
    assert eiffel.generated_tokens <= TOKENS and eiffel.prompt_tokens > 0


def test_drop_in_after_an_existing_retrieval_step(
    cite: CitationRunnable, retriever: Any, eiffel: CitationAnswer
) -> None:
    # The shape create_retrieval_chain passes on: {"input": question, "context": [Document]}.
    chain = RunnablePassthrough.assign(context=itemgetter("input") | retriever) | cite
    answer = chain.invoke({"input": EIFFEL, "chat_history": []})
    assert answer.text == eiffel.text
    assert_guarantee(answer, retriever.invoke(EIFFEL))


def test_stream_yields_tokens_then_citations(chain: Any, eiffel: CitationAnswer) -> None:
    chunks = list(chain.stream(EIFFEL))
    assert all(isinstance(c, CitationAnswerChunk) for c in chunks)
    assert len(chunks) > 3
    assert all(not c.citations and c.finish_reason is None for c in chunks[:-1])
    total = chunks[0]
    for chunk in chunks[1:]:
        total = total + chunk
    assert total.text == eiffel.text  # greedy decoding: the same answer as invoke
    assert [c.source_id for c in total.citations] == [c.source_id for c in eiffel.citations]
    assert_guarantee(total, eiffel.documents)


def test_batch_gives_each_input_its_own_answer(retriever: Any) -> None:
    # In float32 left padding leaves greedy answers as they are one at a time (benchmarks/
    # README.md: 51 of 51). In bfloat16, the default where the CPU computes it natively, the
    # padded shapes round differently and a near-tie can flip a token.
    model = CiteGenerator.default(progress=False, dtype="float32")
    cite = CitationRunnable(generator=model, max_new_tokens=TOKENS)
    inputs = [{"question": q, "context": retriever.invoke(q)} for q in (EIFFEL, EVEREST)]
    alone = [cite.invoke(input_).text for input_ in inputs]
    answers = cite.batch(inputs)
    assert [answer.text for answer in answers] == alone  # each the answer of its input alone
    assert answers[0].text != answers[1].text
    for answer, input_ in zip(answers, inputs, strict=True):
        assert_guarantee(answer, input_["context"])


def test_astream_events_and_ainvoke(
    cite: CitationRunnable, retriever: Any, everest: CitationAnswer
) -> None:
    chain = {"context": retriever, "question": RunnablePassthrough()} | cite.with_config(
        run_name="cited_answer"
    )

    async def run() -> tuple[list[dict[str, Any]], CitationAnswer]:
        config = {"run_name": "rag", "tags": ["rag"]}
        events = [e async for e in chain.astream_events(EVEREST, config, version="v2")]
        return events, await chain.ainvoke(EVEREST)

    events, answer = asyncio.run(run())
    assert events[0]["name"] == "rag" and events[-1]["name"] == "rag"
    ours = [e for e in events if e["name"] == "cited_answer"]
    kinds = [e["event"] for e in ours]
    assert kinds[0] == "on_chain_start" and kinds[-1] == "on_chain_end"
    assert kinds.count("on_chain_stream") > 3
    assert all("rag" in e["tags"] for e in ours)
    assert any(e["event"] == "on_retriever_end" for e in events)
    output = ours[-1]["data"]["output"]
    streamed = "".join(e["data"]["chunk"].text for e in ours if e["event"] == "on_chain_stream")
    assert output.text == streamed == answer.text == everest.text
    assert_guarantee(output, retriever.invoke(EVEREST))
    assert_guarantee(answer, retriever.invoke(EVEREST))


def test_render_markdown_lists_the_retrieved_titles(eiffel: CitationAnswer) -> None:
    markdown = render_markdown(eiffel)
    assert markdown.startswith(eiffel.text.strip())
    titles = [d.metadata["title"] for d in eiffel.documents]
    for number, title in enumerate(titles, start=1):
        assert f"\n{number}. {title}\n" in markdown


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ({"question": EIFFEL, "context": []}, NoSourcesError),
        ({"question": EIFFEL, "context": ["The tower is in Paris."]}, TypeError),
        ({"question": EIFFEL, "context": [Document(page_content="   ")]}, NoSourcesError),
        ({"question": 7, "context": [Document(page_content="x")]}, EmptyQuestionError),
        ({"context": [Document(page_content="x")]}, ValueError),
        ("When was it built?", TypeError),
    ],
)
def test_bad_input_with_the_real_model(cite: CitationRunnable, value: Any,
                                       error: type[Exception]) -> None:
    with pytest.raises(error):
        cite.invoke(value)
    with pytest.raises(error):
        list(cite.stream(value))


def test_blank_documents_are_left_out_or_refused(
    default_generator: CiteGenerator, retriever: Any
) -> None:
    documents = retriever.invoke(EVEREST)
    given = [Document(page_content="  \n", metadata={"title": "Blank"}), *documents]
    cite = CitationRunnable(generator=default_generator, max_new_tokens=TOKENS)
    answer = cite.invoke({"question": EVEREST, "context": given})
    assert_guarantee(answer, documents)  # [N] is the N-th document the model saw
    strict = CitationRunnable(generator=default_generator, empty_sources="raise")
    with pytest.raises(EmptySourceError, match="document 1 of 4 \\(Blank\\)"):
        strict.invoke({"question": EVEREST, "context": given})


def test_no_generator_is_the_embedded_model(
    default_generator: CiteGenerator, everest: CitationAnswer, retriever: Any
) -> None:
    # default_generator is CiteGenerator.default(), which CitationRunnable() loads on first use.
    answer = CitationRunnable(max_new_tokens=TOKENS).invoke(
        {"question": EVEREST, "context": retriever.invoke(EVEREST)}
    )
    assert answer.text == everest.text


def test_leaving_streams_early_frees_the_model(
    cite: CitationRunnable, retriever: Any, caplog: pytest.LogCaptureFixture
) -> None:
    question = {"question": EIFFEL, "context": retriever.invoke(EIFFEL)}
    chunks = cite.stream(question)
    next(chunks)
    chunks.close()

    async def leave_early() -> None:
        chunks = cite.astream(question)
        await anext(chunks)
        await chunks.aclose()

    asyncio.run(leave_early())

    async def break_out() -> None:
        async for _ in cite.astream(question):
            break

    # Left to asyncio, which closes unfinished async generators when asyncio.run ends: any
    # failure there is logged by "asyncio".
    with caplog.at_level(logging.WARNING, logger="asyncio"):
        asyncio.run(break_out())
        gc.collect()
    assert [r.getMessage() for r in caplog.records if r.name == "asyncio"] == []
    # Had a generation kept running, it would still hold the model and this would wait for it.
    started = time.perf_counter()
    short = cite.invoke(question, max_new_tokens=4)
    assert short.generated_tokens <= 4
    assert_guarantee(short, question["context"])
    assert time.perf_counter() - started < 30


def test_quotes_only_quotes_come_back_in_their_documents(
    default_generator: CiteGenerator, retriever: Any
) -> None:
    cite = CitationRunnable(
        generator=default_generator, policy="quotes_only", max_new_tokens=TOKENS
    )
    documents = retriever.invoke(EVEREST)
    answer = cite.invoke({"question": EVEREST, "context": documents})
    assert_guarantee(answer, documents)
    assert answer.quotes, answer.text
    for quote in answer.quotes:
        assert quote.document is documents[quote.source_id - 1]
        assert answer.text[quote.start:quote.end] == quote.text
        original = quote.document.page_content[quote.source_start:quote.source_end]
        assert " ".join(original.split()) == quote.text


def test_an_answer_cut_by_bind_max_new_tokens_says_so(
    cite: CitationRunnable, retriever: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="citeformer"):
        answer = cite.bind(max_new_tokens=8).invoke(
            {"question": EIFFEL, "context": retriever.invoke(EIFFEL)}
        )
    assert answer.finish_reason == "length" and answer.generated_tokens == 8
    assert answer.response_metadata["finish_reason"] == "length"
    (record,) = [r for r in caplog.records if "cut at max_new_tokens=8" in r.getMessage()]
    if not answer.citations:  # the budget ran out before the first marker
        assert "before its last claim was cited" in record.getMessage()
    assert render_markdown(answer).split("\n")[0].endswith("*(cut at max_new_tokens)*")


def test_the_composing_idioms_of_runnables(
    chain: Any, retriever: Any, eiffel: CitationAnswer
) -> None:
    # with_retry, with_fallbacks, bind and with_config wrap the runnable as any other.
    composed = chain.with_retry(stop_after_attempt=2).with_config(run_name="cite")
    assert composed.invoke(EIFFEL).text == eiffel.text
    # A generator whose context is too short for the prompt fails; the fallback answers.
    from citeformer.testing import FakeGenerator

    short = CitationRunnable.from_retriever(retriever, generator=FakeGenerator(context_length=8))
    assert short.with_fallbacks([chain]).invoke(EIFFEL).text == eiffel.text
