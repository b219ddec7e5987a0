"""The LLM a query engine is given so that LlamaIndex never has to resolve ``Settings.llm``."""

from __future__ import annotations

from typing import Any

from llama_index.core.base.llms.types import (
    CompletionResponse,
    CompletionResponseGen,
    LLMMetadata,
)
from llama_index.core.bridge.pydantic import Field
from llama_index.core.constants import DEFAULT_CONTEXT_WINDOW
from llama_index.core.llms.custom import CustomLLM


class CiteformerLLM(CustomLLM):
    """Describes a ``CiteGenerator`` to LlamaIndex; it writes no free-form completions.

    ``index.as_query_engine(response_synthesizer=...)`` resolves ``Settings.llm`` unless it is
    given ``llm=``, and the default ``Settings.llm`` is OpenAI: without
    ``llama-index-llms-openai`` installed that raises ``ImportError`` before the synthesizer
    runs. Passing this LLM (``CitationSynthesizer.llm``) avoids that. A
    ``CitationSynthesizer`` answers from the generator directly and never calls it; a component
    that does call it (a query transform, a chat engine's condense step) gets a clear error
    instead of made-up text, since citeformer only generates answers from numbered sources.

    Instantiate::

        synthesizer = CitationSynthesizer()
        llm = synthesizer.llm                 # a CiteformerLLM sized like its generator

    Query::

        engine = index.as_query_engine(llm=synthesizer.llm, response_synthesizer=synthesizer)
    """

    model_name: str = Field(default="citeformer", description="Name of the wrapped model.")
    context_window: int = Field(default=DEFAULT_CONTEXT_WINDOW, gt=0)
    num_output: int = Field(default=160, gt=0)

    @classmethod
    def class_name(cls) -> str:
        return "CiteformerLLM"

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(
            context_window=self.context_window,
            num_output=self.num_output,
            model_name=self.model_name,
        )

    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        raise NotImplementedError(_NO_COMPLETIONS.format(model=self.model_name))

    def stream_complete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponseGen:
        raise NotImplementedError(_NO_COMPLETIONS.format(model=self.model_name))


_NO_COMPLETIONS = (
    "CiteformerLLM ({model}) only stands in for Settings.llm next to a CitationSynthesizer, "
    "which answers from the retrieved nodes itself; it writes no free-form completions. Give "
    "the component that called it a real LLM (llm=...), or use the CitationSynthesizer to "
    "answer."
)
