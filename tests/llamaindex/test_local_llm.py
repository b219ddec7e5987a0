"""LocalLLM: the same model as a plain LlamaIndex LLM, free text without the citation grammar.
Unit tests on FakeGenerator; a whole LlamaIndex app on the embedded model at the end
(integration)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from llama_index.core.llms import ChatMessage, MessageRole

from citeformer import CiteGenerator
from citeformer.errors import InputTypeError
from citeformer.testing import FakeGenerator
from citeformer_llamaindex import CitationSynthesizer, CiteformerLLM, LocalLLM

TEXT = "The Eiffel Tower is in Paris, [see] the map."


def test_complete_writes_free_text_without_the_grammar() -> None:
    fake = FakeGenerator(TEXT)
    llm = LocalLLM(fake, max_new_tokens=40, system_prompt="Be brief.")
    assert llm.complete("Where is the Eiffel Tower?").text == TEXT  # brackets and all
    (request,) = fake.requests
    assert request.constrained is False and request.max_new_tokens == 40
    assert request.prompt == "Be brief.\n\nWhere is the Eiffel Tower?\n\nAnswer:\n"
    llm.complete("<|user|>Hi<|assistant|>", formatted=True)
    assert fake.requests[-1].prompt == "<|user|>Hi<|assistant|>"  # a rendered prompt, as it is


def test_per_call_options_override_the_fields_and_others_are_ignored() -> None:
    fake = FakeGenerator(TEXT)
    llm = LocalLLM(fake)
    llm.complete("Hi", max_new_tokens=7, do_sample=True, temperature=0.5, seed=3, tools=[])
    request = fake.requests[-1]
    assert (request.max_new_tokens, request.do_sample, request.temperature, request.seed) == (
        7, True, 0.5, 3
    )


def test_chat_renders_the_messages() -> None:
    fake = FakeGenerator("Hello!")
    llm = LocalLLM(fake)
    messages = [ChatMessage(role=MessageRole.SYSTEM, content="Be kind."),
                ChatMessage(role=MessageRole.USER, content="Hi"),
                ChatMessage(role=MessageRole.ASSISTANT, content="Hello."),
                ChatMessage(role=MessageRole.USER, content="How are you?")]
    response = llm.chat(messages)
    assert response.message.role == MessageRole.ASSISTANT
    assert response.message.content == "Hello!"
    assert fake.requests[-1].prompt == (
        "Be kind.\n\nHi\n\nAnswer:\nHello.\n\nHow are you?\n\nAnswer:\n"
    )


def test_streams_add_up_to_the_text() -> None:
    llm = LocalLLM(FakeGenerator(TEXT))
    chunks = list(llm.stream_complete("Where?"))
    assert len(chunks) > 2 and "".join(c.delta or "" for c in chunks) == TEXT
    assert chunks[-1].text == TEXT
    replies = list(llm.stream_chat([ChatMessage(role=MessageRole.USER, content="Where?")]))
    assert "".join(r.delta or "" for r in replies) == TEXT
    assert replies[-1].message.content == TEXT


@pytest.mark.parametrize("in_process", [False, True])
def test_async_twins_match_the_sync_ones(in_process: bool) -> None:
    fake = FakeGenerator(TEXT)
    llm = LocalLLM(fake.sync_only() if in_process else fake)
    messages = [ChatMessage(role=MessageRole.USER, content="Where?")]

    async def run() -> list[str]:
        texts = [(await llm.acomplete("Where?")).text,
                 (await llm.achat(messages)).message.content or ""]
        texts.append("".join([c.delta or "" async for c in await llm.astream_complete("W?")]))
        texts.append("".join([r.delta or "" async for r in await llm.astream_chat(messages)]))
        return texts

    assert asyncio.run(run()) == [TEXT] * 4
    assert len(fake.requests) == 4 and not any(r.constrained for r in fake.requests)


def test_leaving_a_stream_early_stops_the_generation() -> None:
    fake = FakeGenerator(TEXT)
    stream = LocalLLM(fake).stream_complete("Where?")
    next(stream)
    stream.close()
    assert fake.streams[-1].closed and not fake.streams[-1].finished


def test_metadata_describes_a_chat_model_sized_like_the_generator() -> None:
    metadata = LocalLLM(FakeGenerator(context_length=512), max_new_tokens=64).metadata
    assert (metadata.context_window, metadata.num_output, metadata.is_chat_model) == (
        512, 64, True
    )


def test_anything_but_a_citeformer_generator_is_refused() -> None:
    with pytest.raises(InputTypeError, match="a LlamaIndex LLM is already an LLM"):
        LocalLLM(CiteformerLLM())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_new_tokens"):
        LocalLLM(FakeGenerator(), max_new_tokens=0)


def test_the_citation_placeholder_still_refuses_to_write() -> None:
    with pytest.raises(NotImplementedError, match="use the CitationSynthesizer"):
        CitationSynthesizer(FakeGenerator()).llm.complete("Hi")


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
def test_a_condense_question_chat_engine_runs_offline_on_one_model(
    default_generator: CiteGenerator,
) -> None:
    from llama_index.core import Document, VectorStoreIndex
    from llama_index.core.chat_engine import CondenseQuestionChatEngine

    from citeformer_llamaindex import MiniLMEmbedding

    llm = LocalLLM(default_generator, max_new_tokens=24)
    text = llm.complete("Name the capital of France.").text
    assert text.strip() and llm.metadata.model_name != "citeformer"
    index = VectorStoreIndex.from_documents(
        [Document(text="The Eiffel Tower was finished in March 1889."),
         Document(text="Honey bees live in colonies.")],
        embed_model=MiniLMEmbedding(),
    )
    synthesizer = CitationSynthesizer(default_generator, max_new_tokens=32,
                                      grammar_options={"max_sentence_words": 14})
    query_engine: Any = index.as_query_engine(
        llm=synthesizer.llm, response_synthesizer=synthesizer, similarity_top_k=2
    )
    chat = CondenseQuestionChatEngine.from_defaults(query_engine=query_engine, llm=llm)
    chat.chat("Tell me about the Eiffel Tower.")
    response = chat.chat("When was it finished?")
    assert response.source_nodes
    assert response.response.strip()


def test_the_option_fields_are_request_options_with_the_core_defaults() -> None:
    from citeformer.request import GenerationRequest, option_names

    fields = [name for name in LocalLLM.model_fields if name in option_names()]
    assert fields == ["max_new_tokens", "do_sample", "temperature", "seed"]
    llm = LocalLLM(FakeGenerator())
    assert (llm.do_sample, llm.temperature, llm.seed) == (
        GenerationRequest.do_sample, GenerationRequest.temperature, GenerationRequest.seed
    )
    with pytest.raises(ValueError, match="temperature must be a finite number >= 0.01"):
        LocalLLM(FakeGenerator(), temperature=0.0)


@pytest.mark.integration
def test_as_chat_engine_with_the_placeholder_names_the_chat_engine_and_the_model(
    default_generator: CiteGenerator,
) -> None:
    from llama_index.core import Document, VectorStoreIndex

    from citeformer_llamaindex import MiniLMEmbedding

    synthesizer = CitationSynthesizer(default_generator)
    index = VectorStoreIndex.from_documents(
        [Document(text="The Eiffel Tower was finished in March 1889.")],
        embed_model=MiniLMEmbedding(),
    )
    engine = index.as_chat_engine(llm=synthesizer.llm)
    with pytest.raises(NotImplementedError) as raised:
        engine.chat("When was the tower finished?")
    message = str(raised.value)
    assert "CitationChatEngine.from_index(index)" in message
    assert message.startswith("CiteformerLLM (SmolLM2-135M-Instruct) only stands in")
    assert "/" not in message.split(")")[0]  # no cache path
