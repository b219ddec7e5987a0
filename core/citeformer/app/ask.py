"""``citeformer ask``: documents to passages, passages to the closest k, those to a cited answer.

``ask`` answers one question; ``citeformer.app.ask_many`` answers a file of them with the same
steps: ``load_passages``, ``open_generator``, ``index_passages``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, TextIO

from citeformer import AnswerGenerator, CitedAnswer, EmptyQuestionError, build_request
from citeformer.app.chunking import DEFAULT_MAX_CHARS
from citeformer.app.documents import DocumentError, Passage, chunk_documents, load_documents
from citeformer.app.errors import PROG
from citeformer.app.index_cache import IndexCache, embedder_name
from citeformer.app.output import answer_json, format_references
from citeformer.app.retrieval import DEFAULT_TOP_K, DenseRetriever, embed_passages
from citeformer.app.services import Services
from citeformer.evidence.refusal import Refusal
from citeformer.request import DEFAULT_BATCH_SIZE, DEFAULT_MAX_NEW_TOKENS, DEFAULT_POLICY
from citeformer.types import CUT_NOTE

__all__ = [
    "DEFAULT_ENGINE",
    "DTYPE_CHOICES",
    "ENGINE_CHOICES",
    "AskOptions",
    "Output",
    "Progress",
    "ask",
    "index_passages",
    "library_logging_shown",
    "library_warnings_to",
    "load_passages",
    "open_generator",
    "silence_library_progress",
]

Output = Literal["text", "json", "stream"]
DEFAULT_ENGINE = "llama.cpp"
DTYPE_CHOICES = ("auto", "float32", "bfloat16", "float16")
"""``--dtype``: ``"auto"`` and the names of ``citeformer.decoding.precision.DTYPES``, written out
so that parsing the command line imports no torch."""
ENGINE_CHOICES = ("llama.cpp", "vllm", "vllm-guided", "sglang")
"""``--engine``: ``citeformer.server.ENGINES``, written out so that a command without ``--server``
imports nothing of the server's path (httpx among it)."""


@dataclass(frozen=True)
class AskOptions:
    """One ``citeformer ask`` command, as parsed from its arguments."""

    question: str | None
    """The question; ``None`` when ``questions`` names a file of them."""
    docs: tuple[str, ...]
    """Document files and folders."""
    policy: str = DEFAULT_POLICY.value
    model: str | None = None
    """``--model``: an HF hub id or local folder; ``None`` is the embedded model."""
    device: str | None = None
    """``--device``: the torch device ``model`` runs on; ``None``: CUDA when there is one, else
    the CPU."""
    dtype: str = "auto"
    """``--dtype``: one of ``DTYPE_CHOICES``, the floating-point type ``model`` runs in."""
    server: str | None = None
    """``--server``: the URL of a serving engine, which then answers instead of ``model``."""
    server_model: str | None = None
    engine: str = DEFAULT_ENGINE
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    top_k: int = DEFAULT_TOP_K
    chunk_chars: int = DEFAULT_MAX_CHARS
    index_cache: bool = True
    """Keep the passage embeddings in the index cache (``citeformer.app.index_cache``);
    ``--no-index-cache`` turns it off."""
    output: Output = "text"
    """``text``: the answer, then references; ``stream``: the same as it is generated;
    ``json``: one JSON object."""
    all_sources: bool = False
    quiet: bool = False
    questions: str | None = None
    """``--questions FILE``: one question per line (or JSON lines), answered as JSON lines."""
    output_file: str | None = None
    """``--output FILE``: where ``--questions`` writes its answers (``None``: stdout)."""
    batch_size: int = DEFAULT_BATCH_SIZE
    """``--batch-size``: questions answered together (a local model's batch, or requests in
    flight to a server)."""
    refusal: Refusal | None = field(default_factory=Refusal)
    """When the answer is the refusal sentence (``--refusal-threshold``); ``None``
    (``--no-refusal``): every question is answered with citations."""


class Progress:
    """Progress lines on stderr (``citeformer: ...``), silenced by ``--quiet``."""

    def __init__(self, enabled: bool, stream: TextIO | None = None) -> None:
        self.enabled = enabled
        self.stream = stream

    def __call__(self, message: str) -> None:
        """Print ``citeformer: <message>``, unless silenced."""
        if self.enabled:
            print(f"{PROG}: {message}", file=self.stream or sys.stderr, flush=True)


def ask(options: AskOptions, services: Services, out: TextIO) -> CitedAnswer:
    """Answer ``options.question`` from ``options.docs`` and print it on ``out``."""
    say = Progress(not options.quiet)
    if options.quiet:
        silence_library_progress()
    question = options.question
    if question is None or not question.strip():
        raise EmptyQuestionError("the question is empty; ask something, e.g. "
                                 f'{PROG} ask "When was the Eiffel Tower completed?" --docs ...')

    passages = load_passages(options, services, say)
    generator = open_generator(options, services, say)
    started = time.perf_counter()
    retriever = index_passages(passages, options, services, say)
    hits = retriever.search(question, options.top_k)
    say(f"retrieved {len(hits)} passage(s) in {time.perf_counter() - started:.1f}s; generating")

    sources = [hit.passage.to_source(score=round(hit.score, 4)) for hit in hits]
    request = build_request(
        question, sources, options.policy, max_new_tokens=options.max_new_tokens,
        refusal=options.refusal,
    )
    if options.output == "stream":
        stream = generator.answer_stream(request)
        for chunk in stream:
            out.write(chunk)
            out.flush()
        answer = stream.answer
        out.write(_cut_note(answer) + "\n")
    else:
        answer = generator.answer(request)

    if options.output == "json":
        data = answer_json(answer, hits, request, options.policy)
        out.write(json.dumps(data, ensure_ascii=False) + "\n")
    else:
        if options.output == "text":
            out.write(answer.text + _cut_note(answer) + "\n")
        out.write(format_references(answer, hits, all_sources=options.all_sources))
    out.flush()
    if answer.abstained:
        why = "the model wrote the refusal" if answer.refusal is None else answer.refusal.reason
        say(f"the retrieved passages do not answer the question: {why} "
            "(--no-refusal answers anyway)")
    if answer.finish_reason == "length":
        say(f"the answer was cut off at --max-new-tokens {options.max_new_tokens}")
    return answer


def _cut_note(answer: CitedAnswer) -> str:
    return f" {CUT_NOTE}" if answer.finish_reason == "length" else ""


def load_passages(options: AskOptions, services: Services, say: Progress) -> list[Passage]:
    """The passages of ``options.docs``; skipped files go to ``services.warn``."""
    documents = load_documents(options.docs, warn=services.warn)
    passages = chunk_documents(documents, options.chunk_chars)
    if not passages:  # load_documents rejects empty files, so this is only a safeguard
        raise DocumentError("the documents contain no text")
    say(f"read {len(documents)} document(s): {len(passages)} passage(s) "
        f"of at most {options.chunk_chars} characters")
    return passages


def open_generator(options: AskOptions, services: Services, say: Progress) -> AnswerGenerator:
    """The server's generator with ``--server``, else the model of ``--model``."""
    if options.server is not None:
        say(f"connecting to the {options.engine} server at {options.server}")
        served = services.connect_server(options.server, options.server_model, options.engine)
        say(f"the server answers with model {served.model}")
        return served
    where = "".join((
        f" on {options.device}" if options.device is not None else "",
        f" in {options.dtype}" if options.dtype != "auto" else "",
    ))
    say(f"loading model {options.model or 'SmolLM2-135M-Instruct (embedded)'}{where}")
    return services.load_model(
        options.model, progress=not options.quiet, dtype=options.dtype, device=options.device
    )


def index_passages(
    passages: list[Passage], options: AskOptions, services: Services, say: Progress
) -> DenseRetriever:
    """A retriever over ``passages``, embedded with ``services.embed``.

    With ``options.index_cache``, only the passages of documents the index cache has no vectors
    for are embedded (none, the second time), and the new vectors are kept there.
    """
    if not options.index_cache:
        say(f"embedding {len(passages)} passage(s) with all-MiniLM-L6-v2")
        return DenseRetriever(passages, services.embed, progress=_embed_progress(say))
    cache = IndexCache.for_documents(options.docs, embedder_name(services.embed))
    lookup = cache.lookup(passages)
    missing = lookup.missing
    if not lookup.stored:
        say(f"embedding {len(passages)} passage(s) with all-MiniLM-L6-v2")
    else:
        say(f"embedding {len(missing)} of {len(passages)} passage(s) with all-MiniLM-L6-v2; "
            f"{lookup.stored} from the index cache")
    fresh = embed_passages(missing, services.embed, progress=_embed_progress(say))
    vectors = cache.complete(lookup, fresh)
    return DenseRetriever.from_vectors(passages, vectors, services.embed)


def _embed_progress(say: Callable[[str], None]) -> Callable[[int, int], None]:
    def report(done: int, total: int) -> None:
        if total > 32:  # a single batch needs no running count
            say(f"embedded {done}/{total} passages")

    return report


@contextlib.contextmanager
def library_warnings_to(warn: Callable[[str], None]) -> Iterator[None]:
    """Show the warnings citeformer itself issues through ``warn`` while the block runs.

    A model cache rebuilt, say, then reads ``citeformer: warning: ...``; the warnings of other
    libraries keep Python's format.
    """
    with warnings.catch_warnings():
        shown = warnings.showwarning

        def show(message: Any, category: type[Warning], *args: Any, **kwargs: Any) -> None:
            if category.__module__.partition(".")[0] == "citeformer":
                warn(str(message))
            else:
                shown(message, category, *args, **kwargs)

        warnings.showwarning = show
        yield


@contextlib.contextmanager
def library_logging_shown(*, shown: bool) -> Iterator[None]:
    """While the block runs, citeformer's log messages (INFO and up) read ``citeformer: ...``.

    The library only logs (``logging.getLogger("citeformer...")``); the command shows what it
    logs on stderr, as its own progress lines, unless ``shown`` is false (``--quiet``: nothing,
    not even a warning, whose news the output carries, such as ``(cut at max_new_tokens)``). The
    logger's handlers and settings are restored after.
    """
    library = logging.getLogger("citeformer")
    handler: logging.Handler = _StderrHandler() if shown else logging.NullHandler()
    handler.setFormatter(logging.Formatter(f"{PROG}: %(message)s"))
    saved = library.level, library.propagate
    library.addHandler(handler)
    library.setLevel(logging.INFO)
    library.propagate = False
    try:
        yield
    finally:
        library.removeHandler(handler)
        library.setLevel(saved[0])
        library.propagate = saved[1]


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to ``sys.stderr`` as it is when a message comes, not as it was at the start."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:
        pass


def silence_library_progress() -> None:
    """Turn off transformers' progress bars and messages (``--quiet``)."""
    # transformers draws "Loading weights" bars for both models; --quiet means nothing on stderr.
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
        hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]
    except ImportError:  # pragma: no cover - transformers is a dependency
        pass
