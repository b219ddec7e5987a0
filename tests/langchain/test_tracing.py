"""The model's run inside CitationRunnable's: LangChain's LLM callbacks and astream_events see the
model start, stream and end (or fail) under the step's run, for each kind of model ``llm=`` takes,
a citeformer generator, and the embedded model (integration)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any
from uuid import UUID

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import BaseMessage
from langchain_core.outputs import LLMResult
from langchain_core.runnables import RunnableLambda

from citeformer.request import GenerationRequest
from citeformer.testing import FakeGenerator, FakeServer
from citeformer_langchain import CitationRunnable, StandaloneQuestion
from tests.langchain.common import DOCS, ask, best_source
from tests.tiny import tiny_tokenizer


class Recorder(BaseCallbackHandler):
    """Every chain and model callback, in order, with its run and parent run."""

    def __init__(self) -> None:
        self.events: list[tuple[str, UUID, UUID | None, dict[str, Any]]] = []

    def _record(self, event: str, run_id: UUID, parent_run_id: UUID | None, **data: Any) -> None:
        self.events.append((event, run_id, parent_run_id, data))

    def on_chain_start(self, serialized: Any, inputs: Any, *, run_id: UUID,
                       parent_run_id: UUID | None = None, **kwargs: Any) -> None:
        self._record("chain_start", run_id, parent_run_id, name=kwargs.get("name"))

    def on_chain_end(self, outputs: Any, *, run_id: UUID, parent_run_id: UUID | None = None,
                     **kwargs: Any) -> None:
        self._record("chain_end", run_id, parent_run_id)

    def on_chain_error(self, error: BaseException, *, run_id: UUID,
                       parent_run_id: UUID | None = None, **kwargs: Any) -> None:
        self._record("chain_error", run_id, parent_run_id, error=error)

    def on_chat_model_start(self, serialized: Any, messages: list[list[BaseMessage]], *,
                            run_id: UUID, parent_run_id: UUID | None = None,
                            **kwargs: Any) -> None:
        self._record("chat_model_start", run_id, parent_run_id, messages=messages, **kwargs)

    def on_llm_start(self, serialized: Any, prompts: list[str], *, run_id: UUID,
                     parent_run_id: UUID | None = None, **kwargs: Any) -> None:
        self._record("llm_start", run_id, parent_run_id, prompts=prompts, **kwargs)

    def on_llm_new_token(self, token: str, *, run_id: UUID, parent_run_id: UUID | None = None,
                         **kwargs: Any) -> None:
        self._record("llm_new_token", run_id, parent_run_id, token=token, chunk=kwargs["chunk"])

    def on_llm_end(self, response: LLMResult, *, run_id: UUID,
                   parent_run_id: UUID | None = None, **kwargs: Any) -> None:
        self._record("llm_end", run_id, parent_run_id, response=response)

    def on_llm_error(self, error: BaseException, *, run_id: UUID,
                     parent_run_id: UUID | None = None, **kwargs: Any) -> None:
        self._record("llm_error", run_id, parent_run_id, error=error)

    def names(self) -> list[str]:
        """The callbacks but the streamed tokens, in order."""
        return [name for name, *_ in self.events if name != "llm_new_token"]

    def of(self, name: str) -> list[dict[str, Any]]:
        return [
            {"run_id": run_id, "parent_run_id": parent, **data}
            for event, run_id, parent, data in self.events if event == name
        ]


def tokens(recorder: Recorder) -> str:
    return "".join(event["token"] for event in recorder.of("llm_new_token"))


def assert_model_run_inside_chain(recorder: Recorder, start: str = "chat_model_start") -> None:
    (chain,) = recorder.of("chain_start")
    (model,) = recorder.of(start)
    (end,) = recorder.of("llm_end")
    assert model["parent_run_id"] == chain["run_id"]
    assert end["run_id"] == model["run_id"]
    assert recorder.names() == ["chain_start", start, "llm_end", "chain_end"]


def usage(result: LLMResult) -> dict[str, int]:
    return dict(result.llm_output["token_usage"]) if result.llm_output else {}


def test_invoke_reports_the_model_as_a_chat_model_run_inside_the_step() -> None:
    recorder = Recorder()
    cite = CitationRunnable(generator=FakeGenerator(best_source), max_new_tokens=40)
    answer = cite.invoke(ask("capital of Germany?"), config={"callbacks": [recorder]})
    assert_model_run_inside_chain(recorder)
    (start,) = recorder.of("chat_model_start")
    (messages,) = start["messages"]
    assert [message.type for message in messages][0] == "system"
    assert messages[-1].type == "human"
    assert "Berlin is the capital of Germany." in messages[-1].content
    assert "capital of Germany?" in messages[-1].content
    assert start["invocation_params"]["max_new_tokens"] == 40
    assert start["name"] == "FakeGenerator"
    assert start["metadata"]["ls_model_type"] == "chat"
    (end,) = recorder.of("llm_end")
    (generation,) = end["response"].generations[0]
    assert generation.message.content == answer.text
    assert generation.generation_info["finish_reason"] == "stop"
    assert usage(end["response"]) == {
        "prompt_tokens": answer.prompt_tokens, "completion_tokens": answer.generated_tokens,
        "total_tokens": answer.prompt_tokens + answer.generated_tokens,
    }
    assert answer.generated_tokens > 0
    assert generation.message.usage_metadata["output_tokens"] == answer.generated_tokens


@pytest.mark.parametrize("how", ["stream", "astream"])
@pytest.mark.parametrize("in_process", [True, False], ids=["in-process", "async"])
def test_streaming_reports_each_piece_as_a_new_token(how: str, in_process: bool) -> None:
    fake = FakeGenerator(best_source)
    recorder = Recorder()
    cite = CitationRunnable(generator=fake.sync_only() if in_process else fake)
    config: Any = {"callbacks": [recorder]}
    if how == "stream":
        chunks = list(cite.stream(ask("capital of Spain?"), config))
    else:
        async def collect() -> list[Any]:
            return [chunk async for chunk in cite.astream(ask("capital of Spain?"), config)]
        chunks = asyncio.run(collect())
    text = "".join(chunk.text for chunk in chunks)
    assert text == "Madrid is the capital of Spain [3]."
    assert tokens(recorder) == text
    assert len(recorder.of("llm_new_token")) > 1
    assert_model_run_inside_chain(recorder)
    (end,) = recorder.of("llm_end")
    assert end["response"].generations[0][0].message.content == text


def test_astream_events_shows_the_model_start_stream_and_end() -> None:
    chain = CitationRunnable.from_retriever(
        RunnableLambda(lambda question: DOCS), generator=FakeGenerator(best_source)
    )

    async def collect() -> list[dict[str, Any]]:
        return [event async for event in chain.astream_events("capital of France?", version="v2")]

    events = asyncio.run(collect())
    kinds = [event["event"] for event in events]
    for kind in ("on_chat_model_start", "on_chat_model_stream", "on_chat_model_end"):
        assert kind in kinds
    assert kinds.index("on_chat_model_start") < kinds.index("on_chat_model_end")
    model = [event for event in events if event["event"].startswith("on_chat_model")]
    assert {event["name"] for event in model} == {"FakeGenerator"}
    step = next(e for e in events if e["event"] == "on_chain_start"
                and e["name"] == "CitationRunnable")
    assert all(event["parent_ids"][-1] == step["run_id"] for event in model)
    streamed = "".join(
        event["data"]["chunk"].content for event in model
        if event["event"] == "on_chat_model_stream"
    )
    assert streamed == "Paris is the capital of France [1]."
    end = next(event for event in model if event["event"] == "on_chat_model_end")
    assert end["data"]["output"].content == streamed
    assert end["data"]["output"].usage_metadata["output_tokens"] > 0


@pytest.mark.parametrize("how", ["batch", "abatch"])
def test_each_input_of_a_batch_gets_its_own_model_run(how: str) -> None:
    recorder = Recorder()
    cite = CitationRunnable(generator=FakeGenerator(best_source))
    inputs = [ask("capital of France?"), {"context": DOCS}, ask("capital of Spain?")]
    config: Any = {"callbacks": [recorder]}
    if how == "batch":
        results = cite.batch(inputs, config, return_exceptions=True)
    else:
        results = asyncio.run(cite.abatch(inputs, config, return_exceptions=True))
    assert isinstance(results[1], Exception)  # no question: refused before the model
    chains = {event["run_id"] for event in recorder.of("chain_start")}
    starts = recorder.of("chat_model_start")
    assert len(chains) == 3 and len(starts) == 2
    assert {start["parent_run_id"] for start in starts} < chains
    ends = {event["run_id"]: event["response"] for event in recorder.of("llm_end")}
    assert set(ends) == {start["run_id"] for start in starts}
    texts = sorted(result.generations[0][0].message.content for result in ends.values())
    assert texts == sorted([results[0].text, results[2].text])
    assert len(recorder.of("chain_error")) == 1


class Failing(FakeGenerator):
    def answer(self, request: GenerationRequest) -> Any:
        raise RuntimeError("the model ran out of memory")

    async def aanswer(self, request: GenerationRequest) -> Any:
        raise RuntimeError("the model ran out of memory")


@pytest.mark.parametrize("how", ["invoke", "ainvoke", "batch"])
def test_a_failing_model_reports_its_error_on_its_run(how: str) -> None:
    recorder = Recorder()
    cite = CitationRunnable(generator=Failing())
    config: Any = {"callbacks": [recorder]}
    with pytest.raises(RuntimeError, match="out of memory"):
        if how == "invoke":
            cite.invoke(ask("France?"), config)
        elif how == "ainvoke":
            asyncio.run(cite.ainvoke(ask("France?"), config))
        else:
            cite.batch([ask("France?")], config)
    (start,) = recorder.of("chat_model_start")
    (error,) = recorder.of("llm_error")
    assert error["run_id"] == start["run_id"]
    assert "out of memory" in str(error["error"])
    assert recorder.names()[-2:] == ["llm_error", "chain_error"]


@pytest.mark.parametrize("how", ["stream", "astream"])
def test_a_stream_left_early_ends_its_model_run(how: str) -> None:
    recorder = Recorder()
    fake = FakeGenerator(best_source, delay=0.01)
    cite = CitationRunnable(generator=fake)
    config: Any = {"callbacks": [recorder]}
    if how == "stream":
        stream = cite.stream(ask("France?"), config)
        next(stream)
        stream.close()
    else:
        async def first() -> None:
            stream = cite.astream(ask("France?"), config)
            await anext(stream)
            await stream.aclose()
        asyncio.run(first())
    (start,) = recorder.of("chat_model_start")
    (error,) = recorder.of("llm_error")
    assert error["run_id"] == start["run_id"] and not recorder.of("llm_end")


def tiny_pipeline() -> Any:
    import torch
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = tiny_tokenizer()
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=2, eos_token_id=tokenizer.eos_token_id,
    ))
    return transformers.pipeline("text-generation", model=model, tokenizer=tokenizer)


def test_a_huggingface_pipeline_is_reported_as_an_llm_with_the_prompt_it_sees() -> None:
    from langchain_huggingface import HuggingFacePipeline

    own = Recorder()  # the user's model's own callbacks hear its runs, as under its invoke
    llm = HuggingFacePipeline(pipeline=tiny_pipeline(), callbacks=[own], tags=["mine"],
                              metadata={"team": "docs"})
    recorder = Recorder()
    cite = CitationRunnable(llm=llm, max_new_tokens=8)
    answer = cite.invoke(ask("capital of France?"), config={"callbacks": [recorder]})
    assert_model_run_inside_chain(recorder, start="llm_start")
    (start,) = recorder.of("llm_start")
    (prompt,) = start["prompts"]  # the tiny tokenizer has no chat template: the plain layout
    assert prompt.endswith("Question: capital of France?\n\nAnswer:\n")
    assert all(document.page_content in prompt for document in DOCS)
    assert start["name"] == "HuggingFacePipeline"
    assert "mine" in start["tags"] and start["metadata"]["team"] == "docs"
    assert start["metadata"]["ls_provider"] == "huggingface"
    assert own.names() == ["llm_start", "llm_end"]  # only the model's run, not the chain's
    (end,) = recorder.of("llm_end")
    assert end["response"].generations[0][0].text == answer.text


def test_a_chat_model_over_a_pipeline_is_reported_as_a_chat_model() -> None:
    from langchain_huggingface import ChatHuggingFace, HuggingFacePipeline

    pipeline = tiny_pipeline()
    llm = ChatHuggingFace(llm=HuggingFacePipeline(pipeline=pipeline), tokenizer=pipeline.tokenizer)
    recorder = Recorder()
    CitationRunnable(llm=llm, max_new_tokens=8).invoke(
        ask("capital of France?"), config={"callbacks": [recorder]}
    )
    assert_model_run_inside_chain(recorder)
    assert recorder.of("chat_model_start")[0]["name"] == "ChatHuggingFace"


def test_a_served_chat_model_is_reported_with_its_name_and_streamed_tokens() -> None:
    from langchain_openai import ChatOpenAI

    server = FakeServer(pieces=["Berlin is the capital of Germany [", "2", "]."])
    llm = ChatOpenAI(base_url="http://vllm.test:8000/v1", model="served-model", api_key="k")
    cite = CitationRunnable(llm=llm, engine="llama.cpp", server_options={"transport": server})
    recorder = Recorder()
    chunks = list(cite.stream(ask("capital of Germany?"), {"callbacks": [recorder]}))
    assert_model_run_inside_chain(recorder)
    (start,) = recorder.of("chat_model_start")
    assert start["name"] == "ChatOpenAI"
    assert start["metadata"]["ls_model_name"] == "served-model"
    assert start["metadata"]["ls_provider"] == "llama.cpp"
    assert tokens(recorder) == "".join(chunk.text for chunk in chunks)
    assert tokens(recorder) == "Berlin is the capital of Germany [2]."


@pytest.mark.parametrize("how", ["invoke", "ainvoke"])
def test_the_standalone_question_is_reported_as_a_completion(how: str) -> None:
    recorder = Recorder()
    condense = StandaloneQuestion(generator=FakeGenerator("When was the tower built?"))
    value = {"question": "When was it built?",
             "chat_history": [("user", "Tell me about the Eiffel Tower."),
                              ("assistant", "It is in Paris [1].")]}
    config: Any = {"callbacks": [recorder]}
    if how == "invoke":
        question = condense.invoke(value, config)
    else:
        question = asyncio.run(condense.ainvoke(value, config))
    assert question == "When was the tower built?"
    assert_model_run_inside_chain(recorder, start="llm_start")
    (start,) = recorder.of("llm_start")
    assert "When was it built?" in start["prompts"][0]
    assert "[1]" not in start["prompts"][0]  # the history is shown without its markers


@pytest.mark.integration
def test_the_embedded_model_reports_its_run_and_tokens(default_generator: Any) -> None:
    recorder = Recorder()
    cite = CitationRunnable(generator=default_generator, max_new_tokens=24)
    documents: Sequence[Any] = DOCS
    chunks = list(cite.stream(ask("What is the capital of France?", list(documents)),
                              {"callbacks": [recorder]}))
    text = "".join(chunk.text for chunk in chunks)
    assert_model_run_inside_chain(recorder)
    (start,) = recorder.of("chat_model_start")
    assert start["metadata"]["ls_provider"] == "huggingface"
    assert start["metadata"]["ls_model_name"]
    assert tokens(recorder) == text and text
    (end,) = recorder.of("llm_end")
    prompt_tokens = usage(end["response"])["prompt_tokens"]
    assert prompt_tokens == chunks[-1].prompt_tokens > 100
