"""The LLM a query engine is given so that LlamaIndex never has to resolve ``Settings.llm``."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from llama_index.core.base.llms.types import (
    CompletionResponse,
    CompletionResponseGen,
    LLMMetadata,
)
from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.constants import DEFAULT_CONTEXT_WINDOW
from llama_index.core.llms.custom import CustomLLM

from citeformer.request import DEFAULT_MAX_NEW_TOKENS

if TYPE_CHECKING:
    from citeformer.generation.protocols import AnswerGenerator

__all__ = ["CiteformerLLM", "model_name"]


class CiteformerLLM(CustomLLM):
    """Describes a citeformer generator to LlamaIndex; it writes no free-form completions.

    ``index.as_query_engine(response_synthesizer=...)`` resolves ``Settings.llm`` unless it is
    given ``llm=``, and the default ``Settings.llm`` is OpenAI: without
    ``llama-index-llms-openai`` installed that raises ``ImportError`` before the synthesizer
    runs. Passing this LLM (``CitationSynthesizer.llm``) avoids that. A
    ``CitationSynthesizer`` answers from the generator directly and never calls it; a component
    that does call it (a query transform, a chat engine's condense step) gets a clear error
    instead of made-up text. For a component that needs a real LLM, use ``LocalLLM``: the same
    model writing free text, without citations.

    Instantiate:
        ```python
        synthesizer = CitationSynthesizer()
        llm = synthesizer.llm                 # a CiteformerLLM sized like its generator
        ```

    Query:
        ```python
        engine = index.as_query_engine(llm=synthesizer.llm, response_synthesizer=synthesizer)
        ```
    """

    model_name: str = Field(default="citeformer", description="Name of the wrapped model.")
    context_window: int = Field(default=DEFAULT_CONTEXT_WINDOW, gt=0)
    num_output: int = Field(default=DEFAULT_MAX_NEW_TOKENS, gt=0)

    _undescribed: Callable[[], AnswerGenerator] | None = PrivateAttr(default=None)

    @classmethod
    def describing(
        cls, generator: Callable[[], AnswerGenerator], *, num_output: int
    ) -> CiteformerLLM:
        """An LLM named and sized like the generator that ``generator()`` returns. It is called
        when ``metadata`` is first read, not before, so that a default model loads on first use.
        """
        llm = cls(num_output=num_output)
        llm._undescribed = generator
        return llm

    @classmethod
    def class_name(cls) -> str:
        return "CiteformerLLM"

    @property
    def metadata(self) -> LLMMetadata:
        if self._undescribed is not None:
            generator, self._undescribed = self._undescribed(), None
            self.model_name = model_name(generator)
            self.context_window = (
                getattr(generator, "context_length", None) or DEFAULT_CONTEXT_WINDOW
            )
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
    "answer; for chat over an index, CitationChatEngine.from_index(index) in place of "
    "index.as_chat_engine(...)."
)


def model_name(generator: object) -> str:
    """The name of a generator's model: a served model's name, else the model's id or folder name.

    A model loaded from a folder is named by the folder (``SmolLM2-135M-Instruct`` for the
    embedded model, whose folder in citeformer's cache also carries the GGUF file's size), not by
    the whole path: the name shows in messages and traces.
    """
    from citeformer.default_model import DEFAULT_MODEL_NAME

    model = getattr(generator, "model", None)
    if isinstance(model, str):  # a served model's name
        return model
    config = getattr(model, "config", None)
    path = str(getattr(config, "_name_or_path", None) or "citeformer")
    if not os.path.isabs(path):  # a hub id, as the user gave it
        return path
    name = os.path.basename(os.path.normpath(path))
    return DEFAULT_MODEL_NAME if name.startswith(f"{DEFAULT_MODEL_NAME}-") else name
