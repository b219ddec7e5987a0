"""citeformer's steering inside vLLM: a logits processor for its server, and ``VLLMGenerator``.

``SteeringProcessor`` runs the steering core (``citeformer.decoding.steering``) on every request
that carries citeformer's payload (``vllm_xargs={"citeformer": ...}``, what ``ServerGenerator``
and ``VLLMGenerator`` send): the request's own grammar, its verbatim quote guard, the evidence
lever and every readability lever of the in-process default. Requests without the payload pass
through untouched. Load it in a server:

```bash
python -m vllm.entrypoints.openai.api_server --model MODEL \
    --logits-processors citeformer.vllm:SteeringProcessor
```

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

Nothing slow on the engine loop. A request's grammar compiles for seconds at the corner of the
grammar bounds (3.3 s for 300 sources, ``max_group=10``, the widest words, on SmolLM2's
vocabulary), and every request in the batch would wait for it. So, as vLLM's own structured
outputs do (``vllm/v1/structured_output/__init__.py``: ``grammar_init`` submits
``_create_grammar`` to a thread pool, and the scheduler holds the request in
``WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR`` until it is done), the payload is read and the
grammar compiled in a thread pool (``_prepare``) as soon as vLLM adds the request; its prefill,
chunked over steps for a long prompt, hides much of it. A logits processor cannot hold a request
in vLLM's scheduler, so a request whose steering is not ready by a step gets, at that step:

- its grammar's check, once compiled (the same grammar the client re-checks the answer against,
  compiled without a vocabulary: 0.3 s at that corner, against 3.3): its row keeps only those
  of its ``CANDIDATES`` likeliest tokens (short punctuation tokens, then ``MORE_CANDIDATES``,
  when none of them fits) that the
  grammar accepts after the answer so far, so every token it writes meanwhile is one the full
  steering accepts (no levers yet);
- before that, a wait for the check of at most ``WAIT_S`` for the whole step; still not ready,
  its row is left as vLLM gave it: vLLM's markers' grammar keeps every marker in 1..N.

When the steering is ready it is advanced through the answer written so far and steers from the
next step on. Where it cannot take that answer (a token written before even the check was
ready), the request is left to vLLM's markers' grammar, and the client's re-check reports it.
The other requests' steps are delayed by another request's preparation at most ``WAIT_S`` plus
the check of its candidates (about 0.2 ms a row), and whatever part of xgrammar's compile holds
Python's lock (tens of ms at the corner, as in vLLM's own pool).
"""

from __future__ import annotations

import logging
import multiprocessing
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
import xgrammar as xgr

from citeformer.answers import WholeAnswer, cited_answer
from citeformer.decoding.batching import Prepared, prepare_all
from citeformer.decoding.engine import prompt_token_ids
from citeformer.decoding.payload import (
    HANDSHAKE,
    HANDSHAKE_REPLY,
    PAYLOAD_KEY,
    request_from_payload,
    steering_payload,
)
from citeformer.decoding.steering import RowSteering, Steering, advance_all, keep_only
from citeformer.decoding.tokenizer_kit import TokenizerKit, answer_text, end_of_sequence_ids
from citeformer.errors import (
    InputTypeError,
    InvalidInputError,
    MissingDependencyError,
    PromptTooLongError,
)
from citeformer.generation.forms import BatchCallForms, CallForms
from citeformer.generation.protocols import AnswerChunks
from citeformer.grammar.rules import marker_grammar
from citeformer.request import GenerationRequest
from citeformer.types import CitedAnswer, FinishReason

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


__all__ = ["SteeringProcessor", "VLLMGenerator"]

logger = logging.getLogger(__name__)

WAIT_S = 0.02
"""Longest one step waits, for all its rows together, for requests whose grammar has not even
its check compiled yet (see the module's docstring)."""
CANDIDATES = 64
"""Likeliest tokens of a request's row checked against its grammar while its steering is being
prepared."""
MORE_CANDIDATES = 1024
"""Tokens checked where none of the ``CANDIDATES`` nor of the short tokens fits (about 5 us
each)."""
SHORT_CHARS = 3
"""Longest token (in bytes) of spaces, digits and punctuation checked where none of the
``CANDIDATES`` fits: what a grammar asks for at a marker or a sentence's end."""

_NEG = float("-inf")
_free_compiler = threading.local()


@dataclass
class _Answer:
    """One steered request: its steering once prepared, and how far it has read its output."""

    steering: Future[RowSteering]
    """The request's steering, prepared in the processor's thread pool."""
    check: Future[xgr.GrammarMatcher]
    """Its grammar without a vocabulary (characters), ready long before ``steering``."""
    output_ids: Sequence[int] | None = None
    """Model Runner V1: the request's running output list (vLLM appends to it)."""
    prompt_len: int = 0
    """Model Runner V2: the prompt's length in the slot's row of token ids."""
    written: list[int] = field(default_factory=list)
    """The output tokens read so far."""
    steered: RowSteering | None = None
    """``steering``'s result once taken (it then steers every step)."""
    fed: int = 0
    """Output tokens already advanced into ``steered``."""
    checked: int = 0
    """Output tokens already accepted by ``check``."""
    failed: bool = False
    """Its steering raised: the answer is being ended."""
    left: bool = False
    """Left to vLLM's markers' grammar: its answer so far is not one the steering can take."""
    caught_up: bool = False
    """``steered`` has taken the answer written before it was ready."""


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
            tokenizer, vocab_size=vocab_size, stop_token_ids=_stop_ids(model_config, tokenizer)
        )
        self._stop_ids = self._kit.stop_token_ids
        self._vocab = self._kit.vocab  # built now, not at the first steered request
        self._steering = Steering(vocab_size)
        self._answers: dict[int, _Answer] = {}
        """Steered requests by batch index (V1) or request slot (V2)."""
        self._short: torch.Tensor | None = None
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
    ) -> _Answer | None:
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
            self._wait_for_checks(pending)
            # What a failed row ends with: its end-of-answer tokens as vLLM gave them (one
            # gather for the batch; the quote guard may leave a row nothing else to read).
            stops = logits[:, self._stop_ids]
            for _, answer in pending:
                self._take(answer)
            self._advance_together([answer for _, answer in pending])
            steered, checked = [], []
            for row, answer in pending:
                if not self._advance(answer):
                    continue
                if answer.steered is not None:
                    steered.append((row, answer))
                elif answer.check.done():
                    checked.append((row, answer))
            answers = dict(steered)
            self._steering.apply(
                logits, [(row, answer.steered) for row, answer in steered],  # type: ignore[misc]
                on_error=lambda row, error: self._fail(answers[row], error),
            )
            if checked:
                self._restrict(logits, checked)
            for row, answer in pending:
                if answer.failed:
                    self._end(logits, row, stops[row], answer)
        except Exception:  # never into vLLM's engine loop
            logger.exception("citeformer steering: a step failed; these rows are not steered")
        return logits

    def _pending_v1(self) -> list[tuple[int, _Answer]]:
        """(row, answer) of every steered request, its new output tokens read."""
        for answer in self._answers.values():
            output = answer.output_ids or ()
            answer.written.extend(output[len(answer.written):])
        return list(self._answers.items())

    def _pending_v2(self, ctx: Any) -> list[tuple[int, _Answer]]:
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

    def _answer_of(self, params: SamplingParams) -> _Answer | None:
        """A request with citeformer's payload, its steering being prepared; else ``None``."""
        payload = (params.extra_args or {}).get(self.payload_key)
        if payload is None:
            return None
        check: Future[xgr.GrammarMatcher] = Future()
        steering = self._pool.submit(self._prepare, payload, check)
        return _Answer(steering, check)

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

    def _wait_for_checks(self, pending: list[tuple[int, _Answer]]) -> None:
        """Wait, ``WAIT_S`` at most in all, for the checks not yet compiled."""
        deadline = time.monotonic() + WAIT_S
        for _, answer in pending:
            if answer.left or answer.check.done():
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            try:
                answer.check.exception(timeout=remaining)
            except TimeoutError:
                return

    def _take(self, answer: _Answer) -> None:
        """Start steering with the request's steering once it is prepared."""
        if answer.steered is not None or answer.failed or not answer.steering.done():
            return
        if answer.steering.exception() is not None:
            # The payload was checked at admission: only an engine-side failure gets here.
            if not answer.left:
                logger.error("citeformer steering: a request's steering could not be prepared; "
                             "it is left to vLLM's markers' grammar: %r",
                             answer.steering.exception())
            answer.left = True
        elif not answer.left:
            answer.steered = answer.steering.result()

    def _advance_together(self, answers: list[_Answer]) -> None:
        """Advance the steered rows that wrote one token since the last step, in one call.

        Their grammars accept their tokens together (``advance_all``); the rest (a request
        catching up, or one written several tokens) goes through ``_advance`` alone.
        """
        ready = [
            answer for answer in answers
            if answer.steered is not None and answer.caught_up and not answer.failed
            and not answer.left and len(answer.written) == answer.fed + 1
        ]
        if not ready:
            return
        advance_all(
            [answer.steered for answer in ready],  # type: ignore[misc]
            [answer.written[answer.fed] for answer in ready],
            on_error=lambda k, error: self._fail(ready[k], error),
        )
        for answer in ready:
            answer.fed += 1

    def _advance(self, answer: _Answer) -> bool:
        """Advance the steering (or, before it, the check) past the new tokens.

        ``False`` where the row is not touched this step.
        """
        if answer.failed or answer.left:
            return False
        if answer.steered is not None:
            try:
                for token in answer.written[answer.fed:]:
                    answer.steered.advance(token)
                    answer.fed += 1
            except Exception as error:
                if answer.caught_up:
                    self._fail(answer, error)
                else:  # what it cannot take was written before it was ready
                    self._leave(answer, error)
                return False
            answer.caught_up = True
            return True
        if not answer.check.done():
            return False
        try:
            check = answer.check.result()
        except Exception as error:
            self._leave(answer, error)
            return False
        for token in answer.written[answer.checked:]:
            if not check.accept_string(self._vocab.token_bytes[token]):
                self._leave(answer, ValueError(f"token {token} breaks the request's grammar"))
                return False
            answer.checked += 1
        return True

    def _restrict(self, logits: torch.Tensor, rows: list[tuple[int, _Answer]]) -> None:
        """Keep, in each row, only the likeliest tokens its grammar's check accepts."""
        index = torch.tensor([row for row, _ in rows], device=logits.device)
        picked = logits[index]
        top = picked.topk(min(CANDIDATES, picked.shape[-1]), dim=-1)
        ids, values = top.indices.tolist(), top.values.tolist()
        for k, (row, answer) in enumerate(rows):
            check = answer.check.result()
            kept = self._accepted(check, ids[k], values[k])
            if not kept:  # the grammar wants a marker or a sentence's end: a short token
                short = self._short_tokens(logits.device)
                scores = logits[row, short]
                order = scores.argsort(descending=True)
                kept = self._accepted(check, short[order].tolist(), scores[order].tolist())
            if not kept:
                more = logits[row].topk(min(MORE_CANDIDATES, logits.shape[-1]))
                kept = self._accepted(check, more.indices.tolist(), more.values.tolist())
            if not kept:
                self._fail(answer, ValueError(
                    f"none of the {MORE_CANDIDATES} likeliest tokens fits the request's grammar "
                    "while its steering is prepared"))
                continue
            keep_only(logits, row, row, torch.tensor(kept, device=logits.device))

    def _accepted(
        self, check: xgr.GrammarMatcher, ids: list[int], values: list[float]
    ) -> list[int]:
        """Those of ``ids`` (by falling ``values``) the check accepts next; it is left as it was."""
        kept = []
        ending = check.is_terminated()
        stops = set(self._stop_ids)
        for token, value in zip(ids, values, strict=True):
            if value == _NEG:
                break  # sorted: the rest is masked too
            if token in stops:
                if ending:
                    kept.append(token)
                continue
            raw = self._vocab.token_bytes[token]
            if raw and check.accept_string(raw):
                check.rollback(1)
                kept.append(token)
        return kept

    def _short_tokens(self, device: torch.device) -> torch.Tensor:
        """The ids of the tokens of at most ``SHORT_CHARS`` spaces, digits and punctuation."""
        if self._short is None:
            self._short = torch.tensor([
                token for token, raw in enumerate(self._vocab.token_bytes)
                if raw and len(raw) <= SHORT_CHARS and not any(chr(b).isalpha() for b in raw)
            ], dtype=torch.long)
        return self._short.to(device)

    def _leave(self, answer: _Answer, error: Exception) -> None:
        logger.warning("citeformer steering: a request is left to vLLM's markers' grammar, its "
                       "answer written before its steering was ready: %r", error)
        answer.left = True
        answer.steered = None

    def wait_prepared(self, timeout: float | None = None) -> None:
        """Wait until every request added so far has its steering prepared.

        ``TimeoutError`` after ``timeout`` seconds for any one of them.
        """
        for answer in list(self._answers.values()):
            answer.steering.exception(timeout=timeout)
    def _fail(self, answer: _Answer, error: Exception) -> None:
        if not answer.failed:
            logger.error("citeformer steering failed for a request; it is ended: %r", error)
        answer.failed = True

    def _end(self, logits: torch.Tensor, row: int, stops: torch.Tensor, answer: _Answer) -> None:
        """End a request whose steering failed.

        Only the end-of-answer tokens are left, as vLLM's own grammar scored them (``stops``,
        read before the steering). Where that grammar does not let the answer end here, the row
        is left as it is: a failure before the steering leaves it as vLLM gave it, one in a
        lever has its edits rolled back, both under the request's grammar; only a quote guard
        that left nothing has the row refilled, evenly, from the request's grammar. The client
        rechecks what was written either way.
        """
        if torch.isfinite(stops).any():
            logits[row] = _NEG
            logits[row, self._stop_ids] = stops
            return
        if torch.isfinite(logits[row]).any():
            return
        matcher = None if answer.steered is None else answer.steered.matcher
        if matcher is None:
            return
        mask = xgr.allocate_token_bitmask(1, logits.shape[-1])
        matcher.fill_next_token_bitmask(mask)
        row_logits = torch.zeros(1, logits.shape[-1], device=logits.device)
        xgr.apply_token_bitmask_inplace(row_logits, mask.to(logits.device))
        logits[row] = row_logits[0]


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


def _stop_ids(model_config: Any, tokenizer: Any) -> list[int]:
    """The ids that end an answer, as ``CiteGenerator`` takes them.

    The generation config's end of sequence, then the tokenizer's.
    """
    configured = model_config.try_get_generation_config().get("eos_token_id")
    return end_of_sequence_ids(configured, getattr(tokenizer, "eos_token_id", None))


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


_PROCESSOR_PATH = f"{__name__}:SteeringProcessor"
