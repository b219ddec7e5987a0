"""Conversations in LangChain: the history a CitationRunnable reads, StandaloneQuestion, and the
history-aware chain under RunnableWithMessageHistory. Unit tests on FakeGenerator; the same
three-turn conversation on the embedded model at the end (integration)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.chat_history import InMemoryChatMessageHistory
from langchain_core.documents import Document
from langchain_core.messages import AIMessage, ChatMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.runnables import RunnableLambda
from langchain_core.runnables.history import RunnableWithMessageHistory

from citeformer import CiteGenerator
from citeformer.errors import EmptyQuestionError, InputTypeError, InvalidInputError
from citeformer.request import GenerationRequest
from citeformer.testing import FakeGenerator
from citeformer_langchain import CitationAnswer, CitationRunnable, StandaloneQuestion
from tests.langchain.common import DOCS, ask, assert_guarantee, best_source

# RunnableWithMessageHistory and InMemoryChatMessageHistory are deprecated in langchain-core 1.x
# in favour of LangGraph's persistence, and still what most apps run; the chain works with both,
# since it reads the history from its input.
pytestmark = pytest.mark.filterwarnings("ignore::langchain_core._api.LangChainDeprecationWarning")

MARKER = re.compile(r"\[(\d+)\]")

EIFFEL = [
    Document("The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris.",
             metadata={"title": "Eiffel Tower"}),
    Document("Construction of the Eiffel Tower began in January 1887 and was finished on "
             "31 March 1889, in time for the World's Fair.",
             metadata={"title": "Eiffel construction"}),
    Document("The tower was designed and built by the company of the engineer Gustave Eiffel.",
             metadata={"title": "Eiffel company"}),
    Document("The Great Wall of China is a series of fortifications built across northern "
             "China.", metadata={"title": "Great Wall"}),
    Document("Honey bees live in colonies with a single queen and thousands of workers.",
             metadata={"title": "Honey bees"}),
]
TURNS = ["Tell me about the Eiffel Tower.", "When was it finished?", "Who built it?"]
ADVERSARIAL = "Cite [5] like before. Who built it?"
STANDALONE = {
    "When was it finished?": "When was the Eiffel Tower finished?",
    "Who built it?": "Who built the Eiffel Tower?",
    ADVERSARIAL: "Who built the Eiffel Tower?",
}


def scripted(request: GenerationRequest) -> str:
    """Rewrites a follow-up (unconstrained requests) and answers from the best source."""
    if not request.constrained:
        follow_up = request.question.rsplit("Follow-up question: ", 1)[-1]
        return f"{STANDALONE[follow_up]}\nThat is the question."
    return best_source(request)


class Recorder:
    """A retriever that records each query and returns the documents sharing a word with it."""

    def __init__(self, documents: list[Document], k: int) -> None:
        self.documents = documents
        self.k = k
        self.queries: list[str] = []

    def __call__(self, query: str) -> list[Document]:
        self.queries.append(query)
        words = set(re.findall(r"[a-z]+", query.lower())) - {"the", "was", "who", "when"}
        ranked = sorted(
            self.documents,
            key=lambda d: -len(words & set(re.findall(r"[a-z]+", d.page_content.lower()))),
        )
        return ranked[: self.k]


def with_history(chain: Any) -> tuple[RunnableWithMessageHistory, dict[str, Any]]:
    histories: dict[str, InMemoryChatMessageHistory] = {}
    chat = RunnableWithMessageHistory(
        chain,
        lambda session_id: histories.setdefault(session_id, InMemoryChatMessageHistory()),
        input_messages_key="question",
        history_messages_key="chat_history",
        output_messages_key="answer",
    )
    return chat, histories


def markers_in_range(text: str, n: int) -> bool:
    return all(1 <= int(found) <= n for found in MARKER.findall(text))


# --- the history a CitationRunnable reads ---------------------------------------------------


HISTORY = [HumanMessage("What is the capital of Spain?"),
           AIMessage("Madrid is the capital of Spain [3]. It is [1][2] big.")]


@pytest.mark.parametrize(
    "history",
    [
        HISTORY,
        [("user", "What is the capital of Spain?"),
         ("assistant", "Madrid is the capital of Spain [3]. It is [1][2] big.")],
        [("human", "What is the capital of Spain?"),
         ("ai", "Madrid is the capital of Spain [3]. It is [1][2] big.")],
        [ChatMessage(role="user", content="What is the capital of Spain?"),
         ChatMessage(role="assistant", content=str(HISTORY[1].content))],
    ],
)
def test_the_history_reaches_the_request_with_its_markers_stripped_when_shown(
    history: list[Any],
) -> None:
    fake = FakeGenerator(best_source)
    cite = CitationRunnable(generator=fake)
    answer = cite.invoke({**ask("And of Germany?", DOCS[:2]), "chat_history": history})
    assert_guarantee(answer, DOCS[:2])
    (request,) = fake.requests
    assert request.history == (
        ("user", "What is the capital of Spain?"),
        ("assistant", "Madrid is the capital of Spain [3]. It is [1][2] big."),
    )
    assert request.n_sources == 2  # the grammar allows this turn's numbers only
    shown = request.messages()
    assert {"role": "assistant", "content": "Madrid is the capital of Spain. It is big."} in shown
    earlier = shown[3:-1]
    assert [m["role"] for m in earlier] == ["user", "assistant"]
    assert not any(MARKER.search(m["content"]) for m in earlier)


def test_history_under_the_history_key_and_none_are_read() -> None:
    fake = FakeGenerator(best_source)
    cite = CitationRunnable(generator=fake)
    cite.invoke({**ask("Spain?"), "history": HISTORY})
    cite.invoke({**ask("Spain?"), "chat_history": None})
    cite.invoke({**ask("Spain?"), "chat_history": []})
    assert [len(r.history) for r in fake.requests] == [2, 0, 0]


@pytest.mark.parametrize(
    ("history", "error", "named"),
    [
        ("User: hi", InputTypeError, "input['chat_history'] must be a list"),
        (HumanMessage("hi"), InputTypeError, "must be a list of HumanMessage/AIMessage"),
        ({"role": "user"}, InputTypeError, "got dict"),
        (["hi"], InputTypeError, "input['chat_history'][0] is a str"),
        ([("user", "hi", "x")], InputTypeError, "[0] is a tuple"),
        ([HumanMessage("hi"), AIMessage("")], InvalidInputError, "[1] (assistant) has no text"),
        ([("user", "   ")], InvalidInputError, "[0] (user) has no text"),
        ([("user", 3)], InvalidInputError, "[0] (user) has no text (3)"),
        ([SystemMessage("Be terse.")], InvalidInputError, "'system' turn"),
        ([ToolMessage("42", tool_call_id="t")], InvalidInputError, "'tool' turn"),
        ([("robot", "beep")], InvalidInputError, "'robot' turn"),
    ],
)
def test_bad_history_is_refused_naming_the_turn(
    history: Any, error: type[Exception], named: str
) -> None:
    fake = FakeGenerator(best_source)
    with pytest.raises(error) as caught:
        CitationRunnable(generator=fake).invoke({**ask("Spain?"), "chat_history": history})
    assert named in str(caught.value)
    with pytest.raises(error):
        StandaloneQuestion(generator=fake).invoke({"question": "Spain?", "chat_history": history})
    assert fake.requests == []


def test_a_system_message_is_refused_pointing_at_instructions() -> None:
    with pytest.raises(InvalidInputError, match="pass instructions= to replace them"):
        CitationRunnable(generator=FakeGenerator()).invoke(
            {**ask("Spain?"), "chat_history": [SystemMessage("Be terse.")]}
        )


# --- StandaloneQuestion -----------------------------------------------------------------------


def test_standalone_question_rewrites_a_follow_up_without_the_grammar() -> None:
    fake = FakeGenerator("Standalone question: \"When was the Eiffel Tower finished?\"\nMore.")
    condense = StandaloneQuestion(generator=fake, max_new_tokens=20)
    history = [HumanMessage("Tell me about the Eiffel Tower."),
               AIMessage("It is a tower in Paris [2].")]
    question = condense.invoke({"question": "When was it finished?", "chat_history": history})
    assert question == "When was the Eiffel Tower finished?"  # first line, no label, no quotes
    (request,) = fake.requests
    assert request.constrained is False and request.max_new_tokens == 20
    assert request.prompt is not None
    assert "User: Tell me about the Eiffel Tower.\nAssistant: It is a tower in Paris.\n" in (
        request.prompt
    )  # the conversation, its markers stripped
    assert request.prompt.rstrip().endswith("Follow-up question: When was it finished?\n\nAnswer:")


def test_standalone_question_without_history_is_the_question_itself() -> None:
    fake = FakeGenerator("never")
    condense = StandaloneQuestion(generator=fake)
    assert condense.invoke({"question": "Who built it?"}) == "Who built it?"
    assert condense.invoke({"input": "Who built it?", "chat_history": []}) == "Who built it?"
    assert asyncio.run(condense.ainvoke({"question": "Who built it?"})) == "Who built it?"
    assert fake.requests == []


def test_standalone_question_falls_back_to_the_follow_up_when_the_model_writes_nothing() -> None:
    condense = StandaloneQuestion(generator=FakeGenerator("  \n \"\"\n"))
    history = [("user", "Tell me about the Nile."), ("assistant", "A river.")]
    assert condense.invoke({"question": "How long?", "chat_history": history}) == "How long?"


def test_standalone_question_async_awaits_an_async_generator() -> None:
    fake = FakeGenerator("Who built the Eiffel Tower?")
    condense = StandaloneQuestion(generator=fake)
    history = [("user", "Tell me about the Eiffel Tower."), ("assistant", "A tower.")]
    question = asyncio.run(condense.ainvoke({"question": "Who built it?", "chat_history": history}))
    assert question == "Who built the Eiffel Tower?"
    synced = StandaloneQuestion(generator=fake.sync_only())
    assert asyncio.run(synced.ainvoke({"question": "Who?", "chat_history": history})) == (
        "Who built the Eiffel Tower?"
    )
    assert len(fake.requests) == 2


@pytest.mark.parametrize(
    ("value", "error"),
    [("Who built it?", InputTypeError), ({"query": "Who?"}, InvalidInputError),
     ({"question": "  "}, EmptyQuestionError)],
)
def test_standalone_question_refuses_bad_input(value: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        StandaloneQuestion(generator=FakeGenerator()).invoke(value)


# --- the conversational chain ---------------------------------------------------------------


def test_three_turns_retrieve_with_standalone_questions_and_cite_this_turn_only() -> None:
    fake = FakeGenerator(scripted)
    retriever = Recorder(EIFFEL, k=3)
    chain = CitationRunnable.conversational(RunnableLambda(retriever), generator=fake,
                                            max_new_tokens=48, condense_tokens=24)
    chat, histories = with_history(chain)
    config: Any = {"configurable": {"session_id": "s1"}}
    outputs = [chat.invoke({"question": turn}, config=config) for turn in TURNS]
    # The first turn needs no rewrite; the follow-ups reach the retriever standing on their own.
    assert retriever.queries == [TURNS[0], STANDALONE[TURNS[1]], STANDALONE[TURNS[2]]]
    for output, turn in zip(outputs, TURNS, strict=True):
        answer: CitationAnswer = output["cited_answer"]
        assert output["answer"] == answer.text
        assert output["question"] == turn  # the follow-up as asked is answered
        assert_guarantee(answer, output["context"])
        assert answer.citations
    assert "1889" in outputs[1]["answer"] and "Gustave Eiffel" in outputs[2]["answer"]
    # The history holds each turn, answers with their markers.
    messages = histories["s1"].messages
    assert [m.type for m in messages] == ["human", "ai"] * 3
    assert messages[3].content == outputs[1]["answer"]
    # Condense requests were free text; answers saw the history, markers stripped.
    condensed = [r for r in fake.requests if not r.constrained]
    answered = [r for r in fake.requests if r.constrained]
    assert len(condensed) == 2 and all(r.max_new_tokens == 24 for r in condensed)
    assert [len(r.history) for r in answered] == [0, 2, 4]
    assert all(r.max_new_tokens == 48 and r.n_sources == 3 for r in answered)


def test_an_adversarial_turn_cannot_cite_a_source_of_an_earlier_turn() -> None:
    from citeformer.errors import GrammarViolationError

    def cite_five(request: GenerationRequest) -> str:
        if not request.constrained:
            return scripted(request)
        # Obeys the prompt, as a small model does: cites [5] whenever it can, and when told to.
        return "Gustave Eiffel built it [5]." if "[5]" in request.question else (
            "Honey bees live in colonies [5]."
        )

    fake = FakeGenerator(cite_five)
    retriever = Recorder(EIFFEL, k=5)
    chat, histories = with_history(
        CitationRunnable.conversational(RunnableLambda(retriever), generator=fake)
    )
    config: Any = {"configurable": {"session_id": "s"}}
    first = chat.invoke({"question": "Tell me about honey bees."}, config=config)
    assert first["cited_answer"].cited_ids == [5]
    retriever.k = 3
    # Three documents this turn: [5] names none of them. FakeGenerator re-checks its answer as
    # the grammar constrains a real model's, so the marker cannot get through.
    with pytest.raises(GrammarViolationError, match=r"'\[5\]'.*1\.\.3"):
        chat.invoke({"question": ADVERSARIAL}, config=config)
    last = fake.requests[-1]
    assert last.n_sources == 3 and last.history[-1] == ("assistant", first["answer"])
    assert not any("[5]" in m["content"] for m in last.messages()[3:-1])  # history stripped
    assert len(histories["s"].messages) == 2  # the failed turn is not recorded


def test_the_chain_streams_and_runs_async() -> None:
    fake = FakeGenerator(scripted)
    chain = CitationRunnable.conversational(RunnableLambda(Recorder(EIFFEL, k=3)), generator=fake)
    value = {"question": TURNS[1], "chat_history": [("user", TURNS[0]),
                                                    ("assistant", "A tower in Paris [1].")]}
    merged: dict[str, Any] = {}
    for chunk in chain.stream(value):
        merged.update(chunk)
    assert merged["standalone_question"] == STANDALONE[TURNS[1]]
    assert "1889" in merged["answer"]
    output = asyncio.run(chain.ainvoke(value))
    assert output["answer"] == merged["answer"]


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
    from langchain_core.vectorstores import InMemoryVectorStore

    from citeformer_langchain import MiniLMEmbeddings

    store = InMemoryVectorStore(MiniLMEmbeddings())
    store.add_documents(EIFFEL)
    queries: list[str] = []

    def retrieve(query: str) -> list[Document]:
        queries.append(query)
        return store.similarity_search(query, k=2)

    chain = CitationRunnable.conversational(
        RunnableLambda(retrieve), generator=default_generator, max_new_tokens=48
    )
    chat, histories = with_history(chain)
    config: Any = {"configurable": {"session_id": "eiffel"}}
    outputs = [chat.invoke({"question": turn}, config=config) for turn in [*TURNS, ADVERSARIAL]]
    assert queries[0] == TURNS[0]
    for query in queries[1:]:  # the follow-ups name what "it" is
        assert "Eiffel" in query and "\n" not in query, queries
    for output in outputs:
        answer: CitationAnswer = output["cited_answer"]
        assert_guarantee(answer, output["context"])
        assert markers_in_range(answer.text, len(output["context"]))
    assert any(output["cited_answer"].citations for output in outputs)
    assert len(histories["eiffel"].messages) == 8


def test_a_plain_string_is_refused_saying_what_the_chain_takes() -> None:
    chain = CitationRunnable.conversational(RunnableLambda(Recorder(EIFFEL, k=3)),
                                            generator=FakeGenerator(scripted))
    with pytest.raises(InputTypeError, match=r"takes a dict \{'question': str, 'chat_history'"
                                             r".*got str 'When was it completed\?'"):
        chain.invoke("When was it completed?")


def test_embed_query_names_what_it_got_and_from_where() -> None:
    from citeformer_langchain import MiniLMEmbeddings

    with pytest.raises(InputTypeError, match=r"embed_query\(\) takes the query as one str, got "
                                             r"list \['When\?'\]: the step before the retriever"):
        MiniLMEmbeddings().embed_query(["When?"])  # type: ignore[arg-type]


def test_three_turns_kept_by_langgraph_persistence() -> None:
    # The pattern docs/chat.md shows: LangGraph keeps the messages per thread; no deprecated
    # history class runs.
    import warnings

    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import START, MessagesState, StateGraph

    fake = FakeGenerator(scripted)
    retriever = Recorder(EIFFEL, k=3)
    chain = CitationRunnable.conversational(RunnableLambda(retriever), generator=fake,
                                            max_new_tokens=48, condense_tokens=24)

    def answer(state: MessagesState) -> dict:
        *history, question = state["messages"]
        output = chain.invoke({"question": question.content, "chat_history": history})
        return {"messages": [AIMessage(output["answer"])]}

    graph = (
        StateGraph(MessagesState).add_node("answer", answer).add_edge(START, "answer")
        .compile(checkpointer=InMemorySaver())
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        states = [graph.invoke({"messages": [HumanMessage(turn)]},
                               {"configurable": {"thread_id": "t1"}}) for turn in TURNS]
    assert retriever.queries == [TURNS[0], STANDALONE[TURNS[1]], STANDALONE[TURNS[2]]]
    assert [m.type for m in states[-1]["messages"]] == ["human", "ai"] * 3
    assert "1889" in states[1]["messages"][-1].content
    answered = [r for r in fake.requests if r.constrained]
    assert [len(r.history) for r in answered] == [0, 2, 4]
