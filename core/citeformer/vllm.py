"""citeformer's steering inside vLLM: a logits processor for its server, and ``VLLMGenerator``.

``SteeringProcessor`` runs the steering core (``citeformer.decoding.steering``) on every request
that carries citeformer's payload (``vllm_xargs={"citeformer": ...}``, what ``ServerGenerator``
and ``VLLMGenerator`` send): the request's own grammar, its verbatim quote guard, the evidence
lever and every readability lever of the in-process default. Requests without the payload pass
through untouched. Load it in a server::

    python -m vllm.entrypoints.openai.api_server --model MODEL
        --logits-processors citeformer.vllm:SteeringProcessor

or offline, ``vllm.LLM(MODEL, logits_processors=[SteeringProcessor])`` (``VLLMGenerator`` does).
Install citeformer into vLLM's environment without its dependencies, which vLLM already has:
``pip install --no-deps PATH_OR_URL_OF_CITEFORMER``.

How the guarantee and the steering share the work. vLLM applies a request's structured-output
grammar before any custom processor (``vllm/v1/worker/gpu_model_runner.py``, ``sample_tokens``:
``apply_grammar_bitmask`` before ``Sampler.forward``), which would leave the processor no trace
of what the model wanted where the grammar said no: the end-intent lever moves exactly that
probability. So a steered request carries the markers' grammar alone
(``citeformer.grammar.marker_grammar``: any text without brackets, markers in 1..N), enforced by
vLLM, and the processor enforces the request's whole grammar itself with xgrammar, as
``CiteGenerator`` does. Without the processor, vLLM still keeps every marker in range; a
``ServerGenerator`` asks once whether the processor is there (``HANDSHAKE``) and otherwise sends
the whole grammar as structured output instead, unsteered.

Both of vLLM 0.32's processor interfaces are implemented by the one class: Model Runner V1's
(``vllm/v1/sample/logits_processor/interface.py``: ``update_state(BatchUpdate)``,
``apply(logits)``; what the CPU build runs) and Model Runner V2's
(``vllm/v1/worker/gpu/sample/logits_processor/interface.py``: ``add_request``,
``apply(logits, ctx)``); each loader checks for its own base class. A processor error must never
reach vLLM, which would end the engine: a request whose steering fails is logged and ended (its
logits keep only the end-of-answer tokens); the other requests go on.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import xgrammar as xgr

from citeformer.answers import WholeAnswer, cited_answer
from citeformer.decoding.batching import Prepared, build_requests, prepare_all
from citeformer.decoding.engine import (
    DecodingEngine,
    answer_text,
    end_of_sequence_ids,
    prompt_token_ids,
)
from citeformer.decoding.payload import (
    HANDSHAKE,
    HANDSHAKE_REPLY,
    PAYLOAD_KEY,
    request_from_payload,
    steering_payload,
)
from citeformer.decoding.steering import RowSteering, Steering, local_grammar, steering_for
from citeformer.errors import InvalidInputError, MissingDependencyError, PromptTooLongError
from citeformer.grammar.rules import marker_grammar
from citeformer.request import (
    DEFAULT_POLICY,
    AnswerChunks,
    GenerationRequest,
    SourceLike,
    build_request,
)
from citeformer.types import CitedAnswer, FinishReason, Policy

try:
    from vllm.v1.sample.logits_processor import BatchUpdate
    from vllm.v1.sample.logits_processor import LogitsProcessor as _ModelRunnerV1Processor
    from vllm.v1.sample.logits_processor.builtin import process_dict_updates
except ImportError as error:  # pragma: no cover - imported inside vLLM only
    raise MissingDependencyError(
        "citeformer.vllm runs inside vLLM (0.32 or later): install citeformer into vLLM's "
        f"environment with `pip install --no-deps` ({error})"
    ) from error
try:
    from vllm.v1.worker.gpu.sample.logits_processor.interface import (
        LogitsProcessor as _ModelRunnerV2Processor,
    )
except ImportError:  # a vLLM without Model Runner V2
    class _ModelRunnerV2Processor:  # type: ignore[no-redef]
        """Stands in for Model Runner V2's base class where vLLM has none."""

if TYPE_CHECKING:
    from typing_extensions import Unpack
    from vllm import SamplingParams

    from citeformer.request import GenerationOptions

__all__ = ["SteeringProcessor", "VLLMGenerator"]

logger = logging.getLogger(__name__)


@dataclass
class _Answer:
    """One steered request: its steering, and how far it has read the request's output."""

    steering: RowSteering
    output_ids: Sequence[int] = ()
    """Model Runner V1: the request's running output list (vLLM appends to it)."""
    prompt_len: int = 0
    """Model Runner V2: the prompt's length in the slot's row of token ids."""
    fed: int = 0
    """Output tokens already advanced into the steering."""
    failed: bool = False
    """Its steering raised: the answer is being ended."""


class SteeringProcessor(_ModelRunnerV1Processor, _ModelRunnerV2Processor):  # type: ignore[misc]
    """citeformer's steering core as a vLLM logits processor (Model Runner V1 and V2).

    A request is steered when its ``extra_args`` hold ``"citeformer"``: the steering payload
    (``citeformer.decoding.payload``), checked by ``validate_params`` when vLLM admits the
    request (a bad payload is an HTTP 400 that names the field). It never raises a token the
    grammar masked: the levers only remove tokens or add finite values.
    """

    payload_key = PAYLOAD_KEY
    """The extra argument the payload travels in."""

    @classmethod
    def validate_params(cls, sampling_params: SamplingParams) -> None:
        """Refuse a malformed payload (``ValueError``, which vLLM answers with HTTP 400)."""
        payload = (sampling_params.extra_args or {}).get(cls.payload_key)
        if payload is None:
            return
        if payload == HANDSHAKE:
            raise ValueError(HANDSHAKE_REPLY)
        request_from_payload(payload)  # InvalidInputError is a ValueError

    def __init__(self, vllm_config: Any, *args: Any) -> None:
        # Model Runner V1 passes (vllm_config, device, is_pin_memory), V2 (vllm_config,
        # req_states).
        self._req_states = args[0] if len(args) == 1 else None
        if getattr(vllm_config, "speculative_config", None) is not None:
            raise InvalidInputError(
                "citeformer's steering processor does not run with speculative decoding: draft "
                "tokens would be steered as if written; start vLLM without it"
            )
        from vllm.tokenizers import cached_tokenizer_from_config

        model_config = vllm_config.model_config
        tokenizer = cached_tokenizer_from_config(model_config)
        vocab_size = int(model_config.get_vocab_size())
        # The engine-neutral part of an engine: TokenizerInfo, compiled grammars, the vocabulary.
        self._engine = DecodingEngine(
            tokenizer, vocab_size=vocab_size, stop_token_ids=_stop_ids(model_config, tokenizer),
            context_length=None,
        )
        self._stop_ids = self._engine.stop_token_ids
        self._vocab = self._engine.vocab  # built now, not at the first steered request
        self._steering = Steering(vocab_size)
        self._answers: dict[int, _Answer] = {}
        """Steered requests by batch index (V1) or request slot (V2)."""

    def is_argmax_invariant(self) -> bool:
        """``False``: it changes which token is likeliest, so vLLM runs it for greedy requests."""
        return False

    # -- Model Runner V1 -------------------------------------------------------------------------

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        """Follow the persistent batch: steered requests added, removed, moved."""
        try:
            process_dict_updates(self._answers, batch_update, self._answer_v1)
        except Exception:  # never into vLLM's engine loop
            logger.exception("citeformer steering: a batch update failed; steering stops")
            self._answers.clear()

    def _answer_v1(
        self, params: SamplingParams, prompt_ids: list[int] | None, output_ids: list[int]
    ) -> _Answer | None:
        steering = self._steering_of(params)
        return None if steering is None else _Answer(steering, output_ids=output_ids)

    # -- Model Runner V2 -------------------------------------------------------------------------

    def add_request(self, req_idx: int, sampling_params: SamplingParams) -> bool:
        """A request entering slot ``req_idx``: steered if it carries citeformer's payload."""
        self._answers.pop(req_idx, None)
        steering = self._steering_of(sampling_params)
        if steering is None or self._req_states is None:
            return False
        prompt_len = int(self._req_states.prompt_len.np[req_idx])
        self._answers[req_idx] = _Answer(steering, prompt_len=prompt_len)
        return True

    def apply_staged_writes(self) -> None:
        """Nothing is staged: the steering reads committed tokens in ``apply``."""

    # -- both ------------------------------------------------------------------------------------

    def apply(self, logits: torch.Tensor, ctx: Any = None) -> torch.Tensor:
        """Steer the rows of the steered requests in place; the others are left as they are."""
        if not self._answers:
            return logits
        try:
            pending = self._pending_v1() if ctx is None else self._pending_v2(ctx)
            # As vLLM gave them (its grammar applied): what a failed row falls back to.
            given = {row: logits[row].clone() for row, _, _ in pending}
            live = [(row, answer) for row, answer, new in pending if self._advance(answer, new)]
            answers = dict(live)
            self._steering.apply(
                logits, [(row, answer.steering) for row, answer in live],
                on_error=lambda row, error: self._fail(answers[row], error),
            )
            for row, answer, _ in pending:
                if answer.failed:
                    self._end(logits, row, given[row])
        except Exception:  # never into vLLM's engine loop
            logger.exception("citeformer steering: a step failed; these rows are not steered")
        return logits

    def _pending_v1(self) -> list[tuple[int, _Answer, list[int]]]:
        """(row, answer, output tokens not yet advanced) of every steered request."""
        return [
            (row, answer, list(answer.output_ids[answer.fed:]))
            for row, answer in self._answers.items()
        ]

    def _pending_v2(self, ctx: Any) -> list[tuple[int, _Answer, list[int]]]:
        """The same for Model Runner V2: tokens read from the slots' committed token ids."""
        states = self._req_states
        slots = ctx.expanded_idx_mapping.tolist()
        rows = [(row, slot) for row, slot in enumerate(slots) if slot in self._answers]
        if not rows or states is None:
            return []
        totals = states.total_len.gpu[[slot for _, slot in rows]].tolist()
        pending = []
        for (row, slot), total in zip(rows, totals, strict=True):
            answer = self._answers[slot]
            start, end = answer.prompt_len + answer.fed, int(total)
            new = states.all_token_ids.gpu[slot, start:end].tolist() if end > start else []
            pending.append((row, answer, [int(token) for token in new]))
        return pending

    def _advance(self, answer: _Answer, tokens: Sequence[int]) -> bool:
        """Advance the steering past ``tokens``; ``False`` once it has failed."""
        if answer.failed:
            return False
        try:
            for token in tokens:
                answer.steering.advance(token)
                answer.fed += 1
        except Exception as error:
            self._fail(answer, error)
            return False
        return True

    def _steering_of(self, params: SamplingParams) -> RowSteering | None:
        """The steering of a request with citeformer's payload; ``None`` for any other."""
        payload = (params.extra_args or {}).get(self.payload_key)
        if payload is None:
            return None
        try:
            request = request_from_payload(payload)
            grammar = self._engine.compile(local_grammar(request))
            return steering_for(
                request, self._vocab, self._stop_ids, matcher=xgr.GrammarMatcher(grammar)
            )
        except Exception:
            logger.exception("citeformer steering: a request's payload could not be read")
            return None

    def _fail(self, answer: _Answer, error: Exception) -> None:
        if not answer.failed:
            logger.error("citeformer steering failed for a request; it is ended: %r", error)
        answer.failed = True

    def _end(self, logits: torch.Tensor, row: int, given: torch.Tensor) -> None:
        """End a request whose steering failed.

        Only the end-of-answer tokens are left, as vLLM's own grammar scored them; where that
        grammar does not let the answer end here, the row is left as vLLM gave it. The client
        rechecks what was written either way.
        """
        kept = given[self._stop_ids]
        if not torch.isfinite(kept).any():
            logits[row] = given
            return
        logits[row] = float("-inf")
        logits[row, self._stop_ids] = kept


def _stop_ids(model_config: Any, tokenizer: Any) -> list[int]:
    """The ids that end an answer, as ``CiteGenerator`` takes them.

    The generation config's end of sequence, then the tokenizer's.
    """
    configured = model_config.try_get_generation_config().get("eos_token_id")
    return end_of_sequence_ids(configured, getattr(tokenizer, "eos_token_id", None))


class VLLMGenerator:
    """Cited answers from ``vllm.LLM`` in this process, steered by ``SteeringProcessor``.

    The same answers as ``CiteGenerator`` from the same request, at vLLM's scale: every marker
    ``[k]`` has 1 <= k <= N (vLLM enforces the markers' grammar, the processor the request's
    own and its levers), and each ``CitedAnswer`` is re-checked as a local one is.

    Instantiate::

        from citeformer.vllm import VLLMGenerator
        gen = VLLMGenerator.default()                         # the embedded SmolLM2-135M
        gen = VLLMGenerator.from_pretrained("Qwen/Qwen2.5-7B-Instruct", max_model_len=8192)
        gen = VLLMGenerator(llm)   # your vllm.LLM, made with logits_processors=[SteeringProcessor]

    Invoke::

        answer = gen.generate(question, sources)
        answers = gen.generate_batch(questions, sources_per_question)   # one vLLM batch
        answers = gen.answer_batch([build_request(q, s, "auto") for q, s in pairs])

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
        self._stop_ids = _stop_ids(llm.llm_engine.model_config, self.tokenizer)

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

    def generate(
        self, question: str, sources: Sequence[SourceLike], policy: Policy | str = DEFAULT_POLICY,
        **options: Unpack[GenerationOptions],
    ) -> CitedAnswer:
        """Answer ``question`` from ``sources``, as ``CiteGenerator.generate`` does."""
        return self.answer(build_request(question, sources, policy, **options))

    def answer(self, request: GenerationRequest) -> CitedAnswer:
        """The answer to a checked request."""
        (answer,) = self.answer_batch([request])
        return answer

    def answer_stream(self, request: GenerationRequest) -> AnswerChunks:
        """The answer as a stream of one chunk (``vllm.LLM`` does not stream)."""
        return WholeAnswer(self.answer(request))

    def generate_batch(
        self,
        questions: Sequence[str],
        sources: Sequence[Sequence[SourceLike]],
        policy: Policy | str = DEFAULT_POLICY,
        **options: Unpack[GenerationOptions],
    ) -> list[CitedAnswer]:
        """Answer ``questions[i]`` from ``sources[i]`` for every i, in one vLLM batch."""
        return self.answer_batch(build_requests(questions, sources, policy, options))

    def answer_batch(self, requests: Sequence[GenerationRequest]) -> list[CitedAnswer]:
        """The answers to many checked requests, in their order, generated together.

        Every row is checked first (prompt length included): one ``InvalidInputError`` names
        each bad row, and nothing runs.
        """
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


_PROCESSOR_PATH = f"{__name__}:SteeringProcessor"
