"""citeformer_llamaindex.models and CitationSynthesizer(llm=...): the user's own LlamaIndex LLM in,
unwrapped; everything else refused at construction. OpenAI-compatible LLMs talk to
citeformer.testing.FakeServer; HuggingFaceLLM runs the embedded model (integration)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from llama_index.core.llms import MockLLM

from citeformer import CiteGenerator, ServerGenerator
from citeformer.errors import InputTypeError, InvalidInputError
from citeformer.testing import FakeGenerator, FakeServer
from citeformer_llamaindex import CitationChatEngine, CitationSynthesizer, LocalLLM
from citeformer_llamaindex.models import generator_from
from tests.llamaindex.common import assert_lined_up, nodes

KINDS = "llm= takes a HuggingFaceLLM (llama-index-llms-huggingface), or an OpenAILike or OpenAI"


def openai_like(**kwargs: Any) -> Any:
    from llama_index.llms.openai_like import OpenAILike

    kwargs.setdefault("model", "served-model")
    kwargs.setdefault("api_key", "secret-key")
    return OpenAILike(**kwargs)


@pytest.mark.parametrize(
    ("llm", "named"),
    [
        (MockLLM(), "MockLLM (llama_index.core.llms.mock.MockLLM)"),
        (LocalLLM(FakeGenerator()), "LocalLLM (citeformer_llamaindex.local_llm.LocalLLM)"),
        ("gpt-4o", "str (builtins.str)"),
        (FakeGenerator(), "FakeGenerator (citeformer.testing._generator.FakeGenerator)"),
    ],
)
def test_an_llm_of_another_kind_is_refused_at_construction(llm: Any, named: str) -> None:
    for build in (CitationSynthesizer, CitationChatEngine.from_defaults):
        with pytest.raises(InputTypeError) as caught:
            if build is CitationSynthesizer:
                CitationSynthesizer(llm=llm)
            else:
                CitationChatEngine.from_defaults(Retriever(), llm=llm)
        message = str(caught.value)
        assert KINDS in message and named in message


class Retriever:
    def retrieve(self, query: str) -> list[Any]:
        return nodes()


@pytest.mark.parametrize(
    ("keywords", "named"),
    [
        ({"bogus": 3}, "takes no keyword 'bogus'; its keywords are"),
        ({"max_tokens": 32}, "'max_tokens' (did you mean 'max_new_tokens'?)"),
        ({"stream": True}, "'stream' (did you mean 'streaming'?)"),
        ({"llm": MockLLM(), "bogus": 3}, "takes no keyword 'bogus'"),
    ],
)
def test_an_unknown_keyword_is_refused_naming_it(keywords: dict[str, Any], named: str) -> None:
    with pytest.raises(InputTypeError, match="CitationSynthesizer takes no keyword") as caught:
        CitationSynthesizer(**keywords)
    assert named in str(caught.value)
    assert "max_new_tokens" in str(caught.value)  # the keywords it does take


def test_generator_and_llm_together_are_refused() -> None:
    with pytest.raises(InvalidInputError, match="both a generator and llm="):
        CitationSynthesizer(FakeGenerator(), llm=openai_like(api_base="http://x/v1"),
                            engine="vllm")


@pytest.mark.parametrize("keywords", [{"engine": "vllm"}, {"server_options": {"timeout": 3}}])
def test_server_settings_without_an_openai_llm_are_refused(keywords: dict[str, Any]) -> None:
    with pytest.raises(InvalidInputError, match="without llm= they do nothing"):
        CitationSynthesizer(FakeGenerator(), **keywords)


def test_an_openai_llm_on_openai_itself_is_refused() -> None:
    from llama_index.llms.openai import OpenAI

    for llm in (openai_like(), OpenAI(model="gpt-4o-mini", api_key="k")):
        with pytest.raises(InvalidInputError, match="OpenAI's API .* which takes no grammar"):
            CitationSynthesizer(llm=llm, engine="vllm")


def test_an_openai_compatible_llm_needs_its_engine() -> None:
    with pytest.raises(InvalidInputError) as caught:
        CitationSynthesizer(llm=openai_like(api_base="http://vllm.test:8000/v1"))
    assert "http://vllm.test:8000/v1 needs engine=" in str(caught.value)
    assert "'vllm', 'vllm-guided', 'sglang'" in str(caught.value)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_openai_like_becomes_a_server_generator(engine: str) -> None:
    server = FakeServer(pieces=["The answer is here [", "3", "]."])
    llm = openai_like(api_base="http://vllm.test:8000/v1", timeout=9.0, max_retries=0,
                      default_headers={"X-Team": "docs"})
    synthesizer = CitationSynthesizer(
        llm=llm, engine=engine, server_options={"transport": server}, max_new_tokens=24
    )
    generator = synthesizer.generator
    assert isinstance(generator, ServerGenerator)
    assert (generator.base_url, generator.model, generator.engine) == (
        "http://vllm.test:8000/v1", "served-model", engine
    )
    assert (generator.timeout, generator.max_retries) == (9.0, 0)
    response = synthesizer.synthesize("Who built it?", nodes())
    assert_lined_up(response)
    assert [c["source_id"] for c in response.metadata["citations"]] == [3]
    # A vLLM is asked first whether it steers (the handshake), then answers one completion.
    assert len(server.bodies) == 1 and server.handshakes == (engine == "vllm")
    request = server.requests[-1]
    assert request.headers["authorization"] == "Bearer secret-key"
    assert request.headers["x-team"] == "docs"
    body = json.loads(request.content)
    assert body["model"] == "served-model" and body["max_tokens"] == 24
    grammar = body["structured_outputs"]["grammar"] if engine == "vllm" else body["ebnf"]
    assert grammar.startswith("root ::= ") and "cite-group" in grammar


def test_server_options_win_over_the_llms_settings() -> None:
    llm = openai_like(api_base="http://vllm.test:8000/v1", timeout=9.0, max_retries=0)
    generator = generator_from(llm, engine="vllm", server_options={"timeout": 1.5})
    assert isinstance(generator, ServerGenerator)
    assert (generator.timeout, generator.max_retries) == (1.5, 0)


def test_a_huggingface_llm_without_its_tokenizer_is_refused() -> None:
    from llama_index.llms.huggingface import HuggingFaceLLM

    # Building one loads a model: a bare instance stands for one whose tokenizer went missing.
    llm = HuggingFaceLLM.__new__(HuggingFaceLLM)
    object.__setattr__(llm, "__pydantic_private__", {"_model": object(), "_tokenizer": None})
    with pytest.raises(InvalidInputError, match="HuggingFaceLLM has no tokenizer"):
        CitationSynthesizer(llm=llm)
    with pytest.raises(InvalidInputError, match="apply to an OpenAI-compatible LLM"):
        CitationSynthesizer(llm=llm, engine="vllm")


def test_importing_the_wrapper_imports_no_optional_package() -> None:
    code = (
        "import sys, citeformer_llamaindex\n"
        "from citeformer.testing import FakeGenerator\n"
        "citeformer_llamaindex.CitationSynthesizer(FakeGenerator())\n"
        "citeformer_llamaindex.LocalLLM(FakeGenerator())\n"
        "print([m for m in sys.modules if m.startswith(('llama_index.llms.', 'openai', "
        "'transformers', 'torch'))])\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert result.stdout.strip() == "[]"


@pytest.mark.integration
def test_huggingface_llm_answers_with_valid_citations(default_generator: CiteGenerator) -> None:
    import torch
    from llama_index.llms.huggingface import HuggingFaceLLM

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        llm = HuggingFaceLLM(model=default_generator.model, tokenizer=default_generator.tokenizer)
        synthesizer = CitationSynthesizer(llm=llm, max_new_tokens=32,
                                          grammar_options={"max_sentence_words": 14})
        generator = synthesizer.generator
        assert isinstance(generator, CiteGenerator)
        assert generator.model is default_generator.model  # the user's model, unwrapped
        response = synthesizer.synthesize("Who built the Eiffel Tower?", nodes())
        assert_lined_up(response)
        assert response.metadata["finish_reason"] in ("stop", "length")
    finally:
        torch.set_num_threads(threads)
