"""citeformer_langchain.models: the user's own LangChain model in, unwrapped; everything else
refused at construction. OpenAI-compatible models talk to citeformer.testing.FakeServer; the
models in this process run the embedded model (integration)."""

from __future__ import annotations

import json
import subprocess
import sys
from types import SimpleNamespace
from typing import Any

import pytest
from langchain_core.language_models import FakeListChatModel, FakeListLLM

from citeformer import CiteGenerator, ServerGenerator
from citeformer.errors import InputTypeError, InvalidInputError
from citeformer.testing import FakeGenerator, FakeServer
from citeformer_langchain import CitationRunnable, StandaloneQuestion
from citeformer_langchain.models import generator_from
from tests.langchain.common import DOCS, ask, assert_guarantee

KINDS = "HuggingFacePipeline or ChatHuggingFace (langchain-huggingface), or a ChatOpenAI or OpenAI"


def chat_openai(**kwargs: Any) -> Any:
    from langchain_openai import ChatOpenAI

    kwargs.setdefault("model", "served-model")
    kwargs.setdefault("api_key", "secret-key")
    return ChatOpenAI(**kwargs)


# --- refused at construction ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("llm", "named"),
    [
        (FakeListLLM(responses=["Paris [1]."]), "FakeListLLM (langchain_core.language_models"),
        (FakeListChatModel(responses=["Paris [1]."]), "FakeListChatModel (langchain_core."),
        ("gpt-4o", "str (builtins.str)"),
        (FakeGenerator(), "FakeGenerator (citeformer.testing._generator.FakeGenerator)"),
    ],
)
@pytest.mark.parametrize("step", [CitationRunnable, StandaloneQuestion])
def test_a_model_of_another_kind_is_refused_at_construction(
    step: type[Any], llm: Any, named: str
) -> None:
    with pytest.raises(InputTypeError) as caught:
        step(llm=llm)
    message = str(caught.value)
    assert named in message
    assert KINDS in message
    if isinstance(llm, FakeGenerator):
        assert "generator=" in message  # where a citeformer generator goes


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"bogus": 3}, "no field 'bogus'; its fields are"),
        ({"generater": FakeGenerator()}, "'generater' (did you mean 'generator'?)"),
        ({"max_tokens": 32}, "'max_tokens' (did you mean 'max_new_tokens'?)"),
        ({"llm": FakeListLLM(responses=["x"]), "bogus": 3}, "no field 'bogus'"),
    ],
)
def test_an_unknown_keyword_is_refused_naming_it(fields: dict[str, Any], named: str) -> None:
    with pytest.raises(InputTypeError, match="CitationRunnable has no field") as caught:
        CitationRunnable(**fields)
    assert named in str(caught.value)
    with pytest.raises(InputTypeError, match="StandaloneQuestion has no field"):
        StandaloneQuestion(**fields)


def test_generator_and_llm_together_are_refused() -> None:
    with pytest.raises(InvalidInputError, match="both generator= and llm="):
        CitationRunnable(generator=FakeGenerator(), llm=chat_openai(base_url="http://x/v1"),
                         engine="vllm")


@pytest.mark.parametrize("fields", [{"engine": "vllm"}, {"server_options": {"timeout": 3}}])
def test_server_settings_without_an_openai_model_are_refused(fields: dict[str, Any]) -> None:
    with pytest.raises(InvalidInputError, match="without llm= they do nothing"):
        CitationRunnable(generator=FakeGenerator(), **fields)


@pytest.mark.parametrize(
    ("base_url", "named"),
    [(None, "has no base_url, so it talks to OpenAI's API, which takes no grammar"),
     ("https://api.openai.com/v1",
      "talks to OpenAI's API (https://api.openai.com/v1), which takes no grammar")],
)
def test_an_openai_model_on_openai_itself_is_refused(
    base_url: str | None, named: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_BASE", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(InvalidInputError) as caught:
        CitationRunnable(llm=chat_openai(base_url=base_url), engine="vllm")
    assert named in str(caught.value)


def test_an_openai_compatible_model_needs_its_engine() -> None:
    with pytest.raises(InvalidInputError) as caught:
        CitationRunnable(llm=chat_openai(base_url="http://vllm.test:8000/v1"))
    message = str(caught.value)
    assert "http://vllm.test:8000/v1 needs engine=" in message
    assert "'vllm'" in message and "'sglang'" in message and "'llama.cpp'" in message
    with pytest.raises(InvalidInputError, match="unknown engine 'vlm'"):
        CitationRunnable(llm=chat_openai(base_url="http://vllm.test:8000/v1"), engine="vlm")


# --- OpenAI-compatible models, on a scripted server ---------------------------------------------


@pytest.mark.parametrize(
    ("engine", "grammar_field"),
    [("vllm", ("structured_outputs", "grammar")), ("llama.cpp", ("grammar",)),
     ("sglang", ("ebnf",))],
)
def test_chat_openai_becomes_a_server_generator(
    engine: str, grammar_field: tuple[str, ...]
) -> None:
    server = FakeServer(pieces=["Berlin is the capital of Germany [", "2", "]."])
    llm = chat_openai(base_url="http://vllm.test:8000/v1", default_headers={"X-Team": "docs"},
                      timeout=7.0, max_retries=1)
    cite = CitationRunnable(llm=llm, engine=engine, server_options={"transport": server},
                            max_new_tokens=32)
    generator = cite.resolved_generator
    assert isinstance(generator, ServerGenerator)
    assert (generator.base_url, generator.model, generator.engine) == (
        "http://vllm.test:8000/v1", "served-model", engine
    )
    assert (generator.timeout, generator.max_retries) == (7.0, 1)
    answer = cite.invoke(ask("What is the capital of Germany?"))
    assert_guarantee(answer, DOCS)
    assert answer.cited_documents == [DOCS[1]]
    # A vLLM is asked first whether it steers (the handshake), then answers one completion.
    assert len(server.bodies) == 1 and server.handshakes == (engine == "vllm")
    request = server.requests[-1]
    assert request.url.path == "/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer secret-key"
    assert request.headers["x-team"] == "docs"
    body = json.loads(request.content)
    assert body["model"] == "served-model" and body["max_tokens"] == 32
    grammar: Any = body
    for key in grammar_field:
        grammar = grammar[key]
    assert grammar.startswith("root ::= ") and "cite-group" in grammar  # the grammar went along


def test_openai_completion_model_becomes_a_server_generator() -> None:
    from langchain_openai import OpenAI

    server = FakeServer()
    llm = OpenAI(base_url="http://llama.test:8080/v1", model="smol", api_key="k")
    generator = generator_from(llm, engine="llama.cpp", server_options={"transport": server})
    assert isinstance(generator, ServerGenerator) and generator.model == "smol"
    answer = CitationRunnable(generator=generator).invoke(ask("Capitals?"))
    assert_guarantee(answer, DOCS)
    assert answer.cited_ids == [1, 2]


def test_server_options_win_over_the_models_settings() -> None:
    llm = chat_openai(base_url="http://vllm.test:8000/v1", timeout=7.0, max_retries=1)
    generator = generator_from(
        llm, engine="vllm", server_options={"timeout": 2.5, "max_retries": 0, "deadline": 9.0}
    )
    assert isinstance(generator, ServerGenerator)
    assert (generator.timeout, generator.max_retries, generator.deadline) == (2.5, 0, 9.0)


def test_a_configured_copy_rebuilds_the_same_kind_of_generator() -> None:
    from langchain_core.runnables import ConfigurableField

    server = FakeServer()
    cite = CitationRunnable(
        llm=chat_openai(base_url="http://vllm.test:8000/v1"), engine="vllm",
        server_options={"transport": server},
    ).configurable_fields(max_new_tokens=ConfigurableField(id="answer_tokens"))
    answer = cite.invoke(ask("Capitals?"), config={"configurable": {"answer_tokens": 9}})
    assert_guarantee(answer, DOCS)
    assert json.loads(server.requests[-1].content)["max_tokens"] == 9


# --- models in this process ----------------------------------------------------------------------


class NoTokenizerPipeline:
    """What a transformers pipeline built without a tokenizer looks like to citeformer."""

    task = "text-generation"
    model = SimpleNamespace(name_or_path="tiny")
    tokenizer = None


class SummaryPipeline(NoTokenizerPipeline):
    task = "summarization"


@pytest.mark.parametrize(
    ("pipeline", "named"),
    [
        (NoTokenizerPipeline(), "pipeline has no tokenizer"),
        (SummaryPipeline(), "does the task 'summarization'"),
    ],
)
def test_a_pipeline_that_cannot_be_constrained_is_refused(pipeline: Any, named: str) -> None:
    from langchain_huggingface import HuggingFacePipeline

    llm = HuggingFacePipeline(pipeline=pipeline)
    with pytest.raises(InvalidInputError, match=named):
        CitationRunnable(llm=llm)
    with pytest.raises(InvalidInputError, match="apply to an OpenAI-compatible model"):
        CitationRunnable(llm=llm, engine="vllm")


def test_importing_the_wrapper_imports_no_optional_package() -> None:
    code = (
        "import sys, citeformer_langchain\n"
        "from citeformer_langchain import CitationRunnable\n"
        "CitationRunnable(generator=__import__('citeformer.testing').testing.FakeGenerator())\n"
        "print([m for m in sys.modules if m.split('.')[0] in "
        "('langchain_huggingface', 'langchain_openai', 'openai', 'transformers', 'torch')])\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert result.stdout.strip() == "[]"


@pytest.mark.integration
def test_huggingface_pipeline_and_chat_model_answer_with_valid_citations(
    default_generator: CiteGenerator,
) -> None:
    import torch
    import transformers
    from langchain_core.documents import Document
    from langchain_huggingface import ChatHuggingFace, HuggingFacePipeline

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        pipeline = transformers.pipeline(
            "text-generation", model=default_generator.model,
            tokenizer=default_generator.tokenizer,
        )
        hf = HuggingFacePipeline(pipeline=pipeline)
        documents = [
            Document("The Eiffel Tower is a wrought-iron lattice tower in Paris."),
            Document("The tower was finished in March 1889."),
        ]
        for llm in (hf, ChatHuggingFace(llm=hf, tokenizer=default_generator.tokenizer)):
            cite = CitationRunnable(llm=llm, max_new_tokens=32)
            generator = cite.resolved_generator
            assert isinstance(generator, CiteGenerator)
            assert generator.model is default_generator.model  # the user's model, unwrapped
            answer = cite.invoke(
                {"question": "When was the Eiffel Tower finished?", "context": documents}
            )
            assert_guarantee(answer, documents)
            assert answer.citations and "1889" in answer.text
    finally:
        torch.set_num_threads(threads)
