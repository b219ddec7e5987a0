"""``VLLMGenerator``: cited answers from ``vllm.LLM`` in this process, its processor loaded."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from citeformer.answers import WholeAnswer, cited_answer
from citeformer.decoding.batching import Prepared, prepare_all
from citeformer.decoding.engine import prompt_token_ids
from citeformer.decoding.payload import PAYLOAD_KEY, steering_payload
from citeformer.decoding.tokenizer_kit import answer_text
from citeformer.errors import InputTypeError, InvalidInputError, PromptTooLongError
from citeformer.generation.forms import BatchCallForms, CallForms
from citeformer.generation.protocols import AnswerChunks
from citeformer.grammar.rules import marker_grammar
from citeformer.request import GenerationRequest
from citeformer.types import CitedAnswer, FinishReason
from citeformer.vllm._processor import SteeringProcessor, stop_ids

__all__ = ["VLLMGenerator"]

_PROCESSOR_PATH = "citeformer.vllm:SteeringProcessor"
"""The processor as vLLM's ``logits_processors`` names it (what the docs tell users to pass)."""


class VLLMGenerator(CallForms[AnswerChunks], BatchCallForms):
    """Cited answers from ``vllm.LLM`` in this process, steered by ``SteeringProcessor``.

    The same answers as ``CiteGenerator`` from the same request, at vLLM's scale: every marker
    ``[k]`` has 1 <= k <= N (vLLM enforces the markers' grammar, the processor the request's
    own and its levers), and each ``CitedAnswer`` is re-checked as a local one is.

    Instantiate:
        ```python
        from citeformer.vllm import VLLMGenerator
        gen = VLLMGenerator.default()                         # the embedded SmolLM2-135M
        gen = VLLMGenerator.from_pretrained("Qwen/Qwen2.5-7B-Instruct", max_model_len=8192)
        gen = VLLMGenerator(llm)   # your vllm.LLM, made with logits_processors=[SteeringProcessor]
        ```

    Invoke:
        ```python
        answer = gen.generate(question, sources)
        answers = gen.generate_batch(questions, sources_per_question)   # one vLLM batch
        answers = gen.answer_batch([build_request(q, s, "auto") for q, s in pairs])
        ```

    ``answer_stream`` yields the whole answer as one chunk: ``vllm.LLM`` does not stream.
    """

    def __init__(self, llm: Any) -> None:
        loaded = getattr(llm.llm_engine.model_config, "logits_processors", None) or []
        if not any(p is SteeringProcessor or p == _PROCESSOR_PATH or (
            isinstance(p, type) and issubclass(p, SteeringProcessor)) for p in loaded):
            raise InvalidInputError(
                "this vllm.LLM does not run citeformer's steering processor: make it with "
                "vllm.LLM(model, logits_processors=[citeformer.vllm.SteeringProcessor]), or use "
                "VLLMGenerator.from_pretrained(model)"
            )
        self.llm = llm
        self.tokenizer = llm.get_tokenizer()
        self.context_length: int | None = int(llm.llm_engine.model_config.max_model_len)
        self._stop_ids = stop_ids(llm.llm_engine.model_config, self.tokenizer)

    @classmethod
    def from_pretrained(cls, model: str, **llm_kwargs: Any) -> VLLMGenerator:
        """A ``vllm.LLM`` for ``model`` (hub id or folder) with the processor loaded."""
        from vllm import LLM

        processors = [*llm_kwargs.pop("logits_processors", ()), SteeringProcessor]
        return cls(LLM(model=model, logits_processors=processors, **llm_kwargs))

    @classmethod
    def default(cls, **llm_kwargs: Any) -> VLLMGenerator:
        """The embedded SmolLM2-135M-Instruct (its de-quantized folder), in float32."""
        from citeformer.default_model import cache_folder, check_cache, gguf_path, load_default

        folder = cache_folder(gguf_path())
        if check_cache(folder) is not None:
            load_default(progress=False)  # writes (or repairs) the folder
        llm_kwargs.setdefault("dtype", "float32")
        llm_kwargs.setdefault("max_model_len", 2048)
        return cls.from_pretrained(str(folder), **llm_kwargs)

    def answer(self, request: GenerationRequest) -> CitedAnswer:
        """The answer to a checked request."""
        (answer,) = self.answer_batch([request])
        return answer

    def answer_stream(self, request: GenerationRequest) -> AnswerChunks:
        """The answer as a stream of one chunk (``vllm.LLM`` does not stream)."""
        return WholeAnswer(self.answer(request))

    def answer_batch(
        self, requests: Sequence[GenerationRequest], *, batch_size: int | None = None
    ) -> list[CitedAnswer]:
        """The answers to many checked requests, in their order, generated together.

        Every row is checked first (prompt length included): one ``InvalidInputError`` names
        each bad row, and nothing runs. ``batch_size`` is refused: vLLM schedules the rows
        itself.
        """
        if batch_size is not None:
            raise InputTypeError(
                f"VLLMGenerator takes no batch_size (got {batch_size!r}): vLLM schedules the "
                "rows of a batch itself; drop batch_size="
            )
        rows = prepare_all(self._prepare, requests)
        answers = [row.request.refused() for row in rows]
        if run := [row for row, answer in zip(rows, answers, strict=True) if answer is None]:
            outputs = iter(self.llm.generate(
                [{"prompt_token_ids": row.prompt_ids} for row in run],
                sampling_params=[self._sampling(row.request) for row in run],
                use_tqdm=False,
            ))
        return [
            answer if answer is not None else self._answer(row, next(outputs))
            for row, answer in zip(rows, answers, strict=True)
        ]

    def _prepare(self, request: GenerationRequest) -> Prepared:
        ids = prompt_token_ids(request, self.tokenizer)
        limit = self.context_length
        if limit is not None and len(ids) + request.max_new_tokens > limit:
            raise PromptTooLongError(
                f"the prompt is {len(ids)} tokens and max_new_tokens is "
                f"{request.max_new_tokens}, but vLLM's max_model_len is {limit}; pass fewer or "
                "shorter sources, or a smaller max_new_tokens"
            )
        return Prepared(request, ids)

    def _sampling(self, request: GenerationRequest) -> Any:
        from vllm import SamplingParams
        from vllm.sampling_params import StructuredOutputsParams

        settings: dict[str, Any] = {
            "max_tokens": request.max_new_tokens,
            # Greedy is temperature 0; sampling uses the whole distribution, as CiteGenerator.
            "temperature": request.temperature if request.do_sample else 0.0,
            "top_p": 1.0,
            "seed": request.seed,
        }
        if request.constrained:
            settings["structured_outputs"] = StructuredOutputsParams(
                grammar=marker_grammar(request.n_sources, request.grammar.max_group)
            )
            settings["extra_args"] = {PAYLOAD_KEY: steering_payload(request)}
        return SamplingParams(**settings)

    def _answer(self, row: Prepared, output: Any) -> CitedAnswer:
        completion = output.outputs[0]
        ids = list(completion.token_ids)
        text = answer_text(self.tokenizer, ids, self._stop_ids)
        finish: FinishReason = "length" if completion.finish_reason == "length" else "stop"
        return cited_answer(
            row.request, text, finish, prompt_tokens=len(row.prompt_ids), generated_tokens=len(ids)
        )
