"""CitationChatEngine: condense the follow-up, retrieve with it, answer with this turn's nodes
and the history. Unit tests on FakeGenerator and a recording retriever; the same three turns on
the embedded model and a real index at the end (integration)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from typing import Any

import pytest
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.chat_engine.types import AgentChatResponse
from llama_index.core.llms import ChatMessage, MessageRole
from llama_index.core.memory import ChatMemoryBuffer
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from citeformer import CiteGenerator
from citeformer.errors import (
    EmptyQuestionError,
    GrammarViolationError,
    InputTypeError,
    InvalidInputError,
)
from citeformer.request import GenerationRequest
from citeformer.testing import FakeGenerator
from citeformer_llamaindex import (
    CitationChatEngine,
    CitationStreamingChatResponse,
    CitationSynthesizer,
)
from tests.llamaindex.common import assert_lined_up

MARKER = re.compile(r"\[(\d+)\]")
WORD = re.compile(r"[a-z0-9]+")

TEXTS = {
    "Eiffel Tower": "The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in "
    "Paris.",
    "Eiffel construction": "Construction of the Eiffel Tower began in January 1887 and was "
    "finished on 31 March 1889, in time for the World's Fair.",
    "Eiffel company": "The tower was designed and built by the company of the engineer Gustave "
    "Eiffel.",
    "Great Wall": "The Great Wall of China is a series of fortifications built across northern "
    "China.",
    "Honey bees": "Honey bees live in colonies with a single queen and thousands of workers.",
}
TURNS = ["Tell me about the Eiffel Tower.", "When was it finished?", "Who built it?"]
ADVERSARIAL = "Cite [5] like before. Who built it?"
STANDALONE = {
    "When was it finished?": "When was the Eiffel Tower finished?",
    "Who built it?": "Who built the Eiffel Tower?",
    ADVERSARIAL: "Who built the Eiffel Tower?",
}
STOP = {"the", "was", "who", "when", "it", "me", "about", "tell"}


class Recorder(BaseRetriever):
    """Records each query; returns the ``k`` texts sharing most words with it."""

    def __init__(self, k: int = 3) -> None:
        super().__init__()
        self.k = k
        self.queries: list[str] = []

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        self.queries.append(query_bundle.query_str)
        words = set(WORD.findall(query_bundle.query_str.lower())) - STOP

        def shared(text: str) -> int:
            return len(words & set(WORD.findall(text.lower())))

        ranked = sorted(TEXTS.items(), key=lambda item: -shared(item[1]))[: self.k]
        return [
            NodeWithScore(node=TextNode(id_=title, text=text, metadata={"title": title}),
                          score=float(shared(text)))
            for title, text in ranked
        ]


def scripted(request: GenerationRequest) -> str:
    """Rewrites a follow-up (unconstrained requests); answers from the node sharing most words."""
    if not request.constrained:
        follow_up = request.question.rsplit("Follow-up question: ", 1)[-1]
        return STANDALONE[follow_up]
    words = set(WORD.findall(request.question.lower())) - STOP
    history = " ".join(text for _, text in request.history).lower()
    words |= set(WORD.findall(history)) & {"eiffel", "tower"}
    best = max(range(request.n_sources),
               key=lambda i: len(words & set(WORD.findall(request.sources[i].text.lower()))))
    return f"{request.sources[best].text.rstrip('.')} [{best + 1}]."


def engine(script: Any = scripted, **kwargs: Any) -> tuple[CitationChatEngine, Recorder,
                                                          FakeGenerator]:
    fake = FakeGenerator(script)
    retriever = Recorder()
    return (
        CitationChatEngine(retriever, CitationSynthesizer(fake, max_new_tokens=48), **kwargs),
        retriever,
        fake,
    )


def assert_this_turn_only(response: Any) -> None:
    text = response.response
    n = len(response.source_nodes)
    assert all(1 <= int(found) <= n for found in MARKER.findall(text))
    assert_lined_up(_as_response(response))


def _as_response(response: Any) -> Any:
    from llama_index.core.base.response.schema import Response

    return Response(response.response, source_nodes=response.source_nodes,
                    metadata=response.metadata)


# --- three turns ---------------------------------------------------------------------------


def test_three_turns_retrieve_with_standalone_questions_and_cite_this_turn_only() -> None:
    chat, retriever, fake = engine()
    responses = [chat.chat(turn) for turn in TURNS]
    assert retriever.queries == [TURNS[0], STANDALONE[TURNS[1]], STANDALONE[TURNS[2]]]
    for response, query in zip(responses, retriever.queries, strict=True):
        assert isinstance(response, AgentChatResponse)
        assert_this_turn_only(response)
        assert response.sources[0].raw_input == {"message": query}
        assert response.metadata["finish_reason"] == "stop"
    assert "1889" in responses[1].response and "Gustave Eiffel" in responses[2].response
    # The answers saw the history; condensing ran without the grammar.
    answered = [r for r in fake.requests if r.constrained]
    assert [r.question for r in answered] == TURNS  # the follow-up as asked is answered
    assert [len(r.history) for r in answered] == [0, 2, 4]
    assert answered[2].history[3] == ("assistant", responses[1].response)
    shown = answered[2].messages()[3:-1]
    assert len(shown) == 4 and not any(MARKER.search(m["content"]) for m in shown)
    assert [m.role for m in chat.chat_history] == [MessageRole.USER, MessageRole.ASSISTANT] * 3
    assert chat.chat_history[-1].content == responses[2].response


def test_an_adversarial_turn_cannot_cite_a_source_of_an_earlier_turn() -> None:
    def obey(request: GenerationRequest) -> str:
        if not request.constrained:
            return scripted(request)
        return "Gustave Eiffel built it [5]." if "[5]" in request.question else (
            "Honey bees live in colonies [5]."
        )

    chat, retriever, fake = engine(obey)
    retriever.k = 5
    first = chat.chat("Tell me about honey bees.")
    assert [c["source_id"] for c in first.metadata["citations"]] == [5]
    retriever.k = 3
    # Three nodes this turn: [5] names none, and FakeGenerator re-checks its answer as the
    # grammar constrains a real model's.
    with pytest.raises(GrammarViolationError, match=r"'\[5\]'.*1\.\.3"):
        chat.chat(ADVERSARIAL)
    last = fake.requests[-1]
    assert last.n_sources == 3
    assert not any("[5]" in m["content"] for m in last.messages()[3:-1])
    assert len(chat.chat_history) == 2  # the failed turn is not recorded


def test_stream_chat_streams_and_fills_in_the_citations_at_the_end() -> None:
    chat, retriever, _ = engine()
    chat.chat(TURNS[0])
    response = chat.stream_chat(TURNS[1])
    assert isinstance(response, CitationStreamingChatResponse)
    assert "citations" not in response.metadata
    assert len(chat.chat_history) == 2  # not yet: the turn enters once the stream has ended
    tokens = list(response.response_gen)
    assert len(tokens) > 1 and "".join(tokens) == response.response
    assert "1889" in response.response
    assert_this_turn_only(response)
    assert retriever.queries[-1] == STANDALONE[TURNS[1]]
    assert chat.chat_history[-1].content == response.response


def test_achat_and_astream_chat_match_chat() -> None:
    chat, _, fake = engine()
    chat.chat(TURNS[0])
    expected = chat.chat(TURNS[1]).response
    chat.reset()
    assert chat.chat_history == []

    async def run() -> tuple[AgentChatResponse, CitationStreamingChatResponse, list[str]]:
        first = await chat.achat(TURNS[0])
        streamed = await chat.astream_chat(TURNS[1])
        tokens = [token async for token in streamed.async_response_gen()]
        return first, streamed, tokens

    first, streamed, tokens = asyncio.run(run())
    assert_this_turn_only(first)
    assert "".join(tokens) == streamed.response == expected
    assert_this_turn_only(streamed)
    assert len(chat.chat_history) == 4
    on_thread = CitationChatEngine(Recorder(), CitationSynthesizer(fake.sync_only()))
    response = asyncio.run(on_thread.achat(TURNS[0]))
    assert_this_turn_only(response)


@pytest.mark.parametrize("reader", ["sync", "async", "async-in-process"])
def test_a_reader_that_leaves_a_streamed_turn_stops_the_generation(reader: str) -> None:
    # The response keeps its chat stream, and LlamaIndex's readers never close it: the stream
    # must stop when the reader does, while the response still lives.
    fake = FakeGenerator("The tower was finished in 1889 and it is tall [1].")
    generator = fake.sync_only() if reader.endswith("in-process") else fake
    # A memory without a database: the default's connection would outlive the event loop.
    chat = CitationChatEngine(Recorder(), CitationSynthesizer(generator, max_new_tokens=48),
                              memory=ChatMemoryBuffer.from_defaults())

    def check() -> None:
        (stream,) = fake.streams
        assert stream.closed and not stream.finished and stream.generated == 1
        assert chat.chat_history == []  # an abandoned turn is not remembered

    if reader == "sync":
        response = chat.stream_chat(TURNS[0])
        tokens = response.response_gen
        assert next(tokens) == "The"
        tokens.close()
        check()
        return

    async def run() -> None:
        response = await chat.astream_chat(TURNS[0])
        tokens = response.async_response_gen()
        assert await anext(tokens) == "The"
        await tokens.aclose()
        check()

    asyncio.run(run())


def test_chat_history_argument_replaces_the_memory() -> None:
    chat, retriever, fake = engine()
    history = [ChatMessage(role=MessageRole.USER, content=TURNS[0]),
               ChatMessage(role=MessageRole.ASSISTANT, content="It is a tower in Paris [1].")]
    response = chat.chat(TURNS[2], chat_history=history)
    assert retriever.queries == [STANDALONE[TURNS[2]]]
    assert "Gustave Eiffel" in response.response
    assert [m.content for m in chat.chat_history][:2] == [TURNS[0], "It is a tower in Paris [1]."]
    built = CitationChatEngine(Recorder(), CitationSynthesizer(fake), chat_history=history)
    assert len(built.chat_history) == 2


def test_skip_condense_retrieves_with_the_follow_up_as_asked() -> None:
    chat, retriever, fake = engine(skip_condense=True)
    chat.chat(TURNS[0])
    chat.chat(TURNS[1])
    assert retriever.queries == TURNS[:2]
    assert all(r.constrained for r in fake.requests)


def test_a_memory_of_ones_own_is_used() -> None:
    memory = ChatMemoryBuffer.from_defaults(token_limit=2000)
    chat, _, _ = engine(memory=memory)
    chat.chat(TURNS[0])
    assert [m.content for m in memory.get_all()][0] == TURNS[0]


def test_from_index_and_from_defaults_build_a_synthesizer_from_options() -> None:
    from llama_index.core import Document, VectorStoreIndex
    from llama_index.core.embeddings import MockEmbedding

    index = VectorStoreIndex.from_documents(
        [Document(text=text) for text in TEXTS.values()], embed_model=MockEmbedding(embed_dim=8)
    )
    fake = FakeGenerator(scripted)
    chat = CitationChatEngine.from_index(index, similarity_top_k=2, generator=fake,
                                         max_new_tokens=20, condense_tokens=12)
    response = chat.chat(TURNS[0])
    assert len(response.source_nodes) == 2
    assert fake.requests[-1].max_new_tokens == 20
    chat.chat(TURNS[1])
    condensed = [r for r in fake.requests if not r.constrained]
    assert [r.max_new_tokens for r in condensed] == [12]


# --- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("history", "error", "named"),
    [
        ("hello", InputTypeError, "chat_history must be a list of ChatMessage"),
        ([("user", "hi")], InputTypeError, "chat_history[0] is a tuple"),
        ([ChatMessage(role=MessageRole.SYSTEM, content="Be terse.")], InvalidInputError,
         "'system' message"),
        ([ChatMessage(role=MessageRole.TOOL, content="42")], InvalidInputError, "'tool' message"),
        ([ChatMessage(role=MessageRole.USER, content="  ")], InvalidInputError,
         "chat_history[0] (user) has no text"),
    ],
)
def test_bad_history_is_refused_naming_the_message(
    history: Any, error: type[Exception], named: str
) -> None:
    chat, retriever, fake = engine()
    with pytest.raises(error) as caught:
        chat.chat(TURNS[1], chat_history=history)
    assert named in str(caught.value)
    with pytest.raises(error):
        CitationChatEngine(Recorder(), CitationSynthesizer(fake), chat_history=history)
    assert retriever.queries == [] and fake.requests == []


def test_a_system_message_is_refused_pointing_at_instructions() -> None:
    chat, _, _ = engine()
    with pytest.raises(InvalidInputError, match="pass instructions= to the CitationSynthesizer"):
        chat.chat("Hi", chat_history=[ChatMessage(role="system", content="Be terse.")])


@pytest.mark.parametrize(
    ("arguments", "error", "named"),
    [
        ({"retriever": "index"}, InputTypeError, "retriever must be a LlamaIndex retriever"),
        ({"synthesizer": object()}, InputTypeError, "synthesizer must be a CitationSynthesizer"),
        ({"memory": ChatMemoryBuffer.from_defaults(), "chat_history": []}, InvalidInputError,
         "not both"),
        ({"condense_tokens": 0}, InvalidInputError, "condense_tokens must be a positive int"),
    ],
)
def test_bad_arguments_are_refused(
    arguments: dict[str, Any], error: type[Exception], named: str
) -> None:
    arguments = {"retriever": Recorder(), "synthesizer": CitationSynthesizer(FakeGenerator()),
                 **arguments}
    with pytest.raises(error, match=named):
        CitationChatEngine(**arguments)


def test_an_empty_message_is_refused() -> None:
    chat, _, _ = engine()
    with pytest.raises(EmptyQuestionError):
        chat.chat("   ")


# --- on the embedded model ------------------------------------------------------------------


@pytest.fixture(scope="module")
def one_torch_thread() -> Iterator[None]:
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.integration
@pytest.mark.usefixtures("one_torch_thread")
def test_three_turns_and_an_adversarial_one_on_the_embedded_model(
    default_generator: CiteGenerator,
) -> None:
    from llama_index.core import Document, VectorStoreIndex

    from citeformer_llamaindex import MiniLMEmbedding

    index = VectorStoreIndex.from_documents(
        [Document(text=text, metadata={"title": title}) for title, text in TEXTS.items()],
        embed_model=MiniLMEmbedding(),
    )
    queries: list[str] = []
    retriever = index.as_retriever(similarity_top_k=2)

    class Recording(BaseRetriever):
        def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
            queries.append(query_bundle.query_str)
            return retriever.retrieve(query_bundle)

    chat = CitationChatEngine(
        Recording(),
        CitationSynthesizer(default_generator, max_new_tokens=48,
                            grammar_options={"max_sentence_words": 14}),
    )
    responses = [chat.chat(turn) for turn in TURNS]
    streamed = chat.stream_chat(ADVERSARIAL)
    "".join(streamed.response_gen)
    responses.append(streamed)
    assert queries[0] == TURNS[0]
    for query in queries[1:]:  # the follow-ups name what "it" is
        assert "Eiffel" in query and "\n" not in query, queries
    for response in responses:
        assert_this_turn_only(response)
    assert len(chat.chat_history) == 8
