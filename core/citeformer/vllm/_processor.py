"""``SteeringProcessor``: citeformer's steering behind vLLM's logits-processor interfaces.

It follows vLLM's batch (Model Runner V1's ``BatchUpdate``s, V2's slots), reads each steered
request's payload and compiles its grammar in a thread pool, and hands the steered rows of each
step to ``SteeredRows`` (``citeformer.vllm._rows``). How and why: ``citeformer.vllm``'s docstring.
"""

from __future__ import annotations

import logging
import multiprocessing
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import torch
import xgrammar as xgr

from citeformer.decoding.payload import (
    HANDSHAKE,
    HANDSHAKE_REPLY,
    PAYLOAD_KEY,
    request_from_payload,
)
from citeformer.decoding.steering import RowSteering, Steering
from citeformer.decoding.tokenizer_kit import TokenizerKit, end_of_sequence_ids
from citeformer.errors import InvalidInputError, MissingDependencyError
from citeformer.vllm._rows import SteeredAnswer, SteeredRows

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
    from vllm import SamplingParams


__all__ = ["SteeringProcessor", "stop_ids"]

logger = logging.getLogger(__name__)

_free_compiler = threading.local()


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
        self._kit = TokenizerKit(
            tokenizer, vocab_size=vocab_size, stop_token_ids=stop_ids(model_config, tokenizer)
        )
        self._stop_ids = self._kit.stop_token_ids
        self._steering = Steering(vocab_size)
        self._rows = SteeredRows(
            # The vocabulary built now, not at the first steered request.
            self._steering, self._kit.vocab, self._stop_ids
        )
        self._answers: dict[int, SteeredAnswer] = {}
        """Steered requests by batch index (V1) or request slot (V2)."""
        # As many threads as vLLM's structured outputs compile on (half the CPUs, at most 8).
        self._pool = ThreadPoolExecutor(
            max_workers=max(1, min(multiprocessing.cpu_count() // 2, 8)),
            thread_name_prefix="citeformer-steering",
        )

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
    ) -> SteeredAnswer | None:
        answer = self._answer_of(params)
        if answer is not None:
            answer.output_ids = output_ids
        return answer

    # -- Model Runner V2 -------------------------------------------------------------------------

    def add_request(self, req_idx: int, sampling_params: SamplingParams) -> bool:
        """A request entering slot ``req_idx``: steered if it carries citeformer's payload."""
        self._answers.pop(req_idx, None)
        if self._req_states is None:
            return False
        answer = self._answer_of(sampling_params)
        if answer is None:
            return False
        answer.prompt_len = int(self._req_states.prompt_len.np[req_idx])
        self._answers[req_idx] = answer
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
            if not pending:
                return logits
            self._rows.steer(logits, pending)
        except Exception:  # never into vLLM's engine loop
            logger.exception("citeformer steering: a step failed; these rows are not steered")
        return logits

    def _pending_v1(self) -> list[tuple[int, SteeredAnswer]]:
        """(row, answer) of every steered request, its new output tokens read."""
        for answer in self._answers.values():
            output = answer.output_ids or ()
            answer.written.extend(output[len(answer.written):])
        return list(self._answers.items())

    def _pending_v2(self, ctx: Any) -> list[tuple[int, SteeredAnswer]]:
        """The same for Model Runner V2, the slots' committed token ids read in one gather."""
        states = self._req_states
        slots = ctx.expanded_idx_mapping.tolist()
        rows = [(row, slot) for row, slot in enumerate(slots) if slot in self._answers]
        if not rows or states is None:
            return []
        answers = [self._answers[slot] for _, slot in rows]
        tokens = states.all_token_ids.gpu
        index = torch.tensor([slot for _, slot in rows], device=tokens.device)
        totals = states.total_len.gpu[index].tolist()
        starts = [answer.prompt_len + len(answer.written) for answer in answers]
        counts = [max(0, int(total) - start) for total, start in zip(totals, starts, strict=True)]
        width = max(counts)
        if width:
            columns = torch.tensor(starts, device=tokens.device)[:, None] + torch.arange(
                width, device=tokens.device
            )
            read = tokens[index[:, None], columns.clamp_(max=tokens.shape[1] - 1)].tolist()
            for answer, count, new in zip(answers, counts, read, strict=True):
                answer.written.extend(int(token) for token in new[:count])
        return [(row, answer) for (row, _), answer in zip(rows, answers, strict=True)]

    def _answer_of(self, params: SamplingParams) -> SteeredAnswer | None:
        """A request with citeformer's payload, its steering being prepared; else ``None``."""
        payload = (params.extra_args or {}).get(self.payload_key)
        if payload is None:
            return None
        check: Future[xgr.GrammarMatcher] = Future()
        steering = self._pool.submit(self._prepare, payload, check)
        return SteeredAnswer(steering, check)

    def _prepare(self, payload: str, check: Future[xgr.GrammarMatcher]) -> RowSteering:
        """In the pool: the request's grammar check, then its steering (the slow compile)."""
        try:
            request = request_from_payload(payload)
            check.set_result(xgr.GrammarMatcher(
                _compile_free(request.grammar_text(spell_quotes=True)),
                terminate_without_stop_token=True,
            ))
        except BaseException as error:
            check.set_exception(error)
            logger.exception("citeformer steering: a request's payload could not be read")
            raise
        return self._kit.steering(request)

    def wait_prepared(self, timeout: float | None = None) -> None:
        """Wait until every request added so far has its steering prepared.

        ``TimeoutError`` after ``timeout`` seconds for any one of them.
        """
        for answer in list(self._answers.values()):
            answer.steering.exception(timeout=timeout)


def _compile_free(grammar: str) -> Any:
    """``grammar`` compiled without a vocabulary: its matcher reads characters.

    Several times faster than with one, there being no token masks to build. One compiler per
    thread of the pool.
    """
    compiler = getattr(_free_compiler, "compiler", None)
    if compiler is None:
        compiler = _free_compiler.compiler = xgr.GrammarCompiler(
            xgr.TokenizerInfo([]), cache_enabled=False
        )
    return compiler.compile_grammar(grammar)


def stop_ids(model_config: Any, tokenizer: Any) -> list[int]:
    """The ids that end an answer, as ``CiteGenerator`` takes them.

    The generation config's end of sequence, then the tokenizer's.
    """
    configured = model_config.try_get_generation_config().get("eos_token_id")
    return end_of_sequence_ids(configured, getattr(tokenizer, "eos_token_id", None))
