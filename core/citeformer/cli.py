"""The ``citeformer`` command line.

``citeformer ask "QUESTION" --docs PATH...`` loads the ``.txt``/``.md`` documents at PATH (files or
folders), cuts them into passages, retrieves the top-k passages with local all-MiniLM-L6-v2
embeddings, answers with the embedded SmolLM2-135M-Instruct (or ``--model``) under the chosen
citation policy, and prints the answer followed by a numbered reference list::

    $ citeformer ask "When was the Eiffel Tower completed?" --docs examples/docs
    The Eiffel Tower was completed on 31 March 1889 [1].

    References:
    [1] examples/docs/eiffel_tower.md, line 5

With ``--server URL`` the answer comes from a llama.cpp, vLLM or SGLang server instead of a model
in this process (``--engine`` names which, ``--server-model`` the served model); the grammar travels
with the request and every marker is checked again here::

    $ citeformer ask "When was the Eiffel Tower completed?" --docs examples/docs \
        --server http://localhost:8080

The reference list shows the sources the answer cites, by their marker number, in ascending
order; retrieved passages that are not cited are left out unless ``--all-sources`` is given.
Progress and warnings go to stderr, so stdout holds only the answer (or, with ``--json``, one JSON
object). Exit codes: 0 success, 2 bad input (usage errors, missing or unreadable documents, an
empty question, a model path that does not exist, a server URL that is malformed or cannot be
reached), 1 any other failure, 130 interrupted. Errors
print as ``citeformer: error: ...`` without a traceback (set ``CITEFORMER_DEBUG=1`` to get one).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from citeformer import retrieval
from citeformer.errors import (
    CiteformerError,
    EmptyQuestionError,
    InvalidInputError,
    ModelLoadError,
    ServerConnectionError,
    ServerResponseError,
)
from citeformer.types import CitedAnswer, Policy, Quote

PROG = "citeformer"
EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class _Progress:
    """Progress lines on stderr (``citeformer: ...``), silenced by ``--quiet``."""

    def __init__(self, enabled: bool, stream: TextIO | None = None) -> None:
        self.enabled = enabled
        self.stream = stream

    def __call__(self, message: str) -> None:
        if self.enabled:
            print(f"{PROG}: {message}", file=self.stream or sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# Hooks the tests replace: loading the generator and embedding texts.


def load_generator(model: str | None, *, progress: bool) -> Any:
    """The generator: the embedded model, or ``model`` (an HF hub id or a local folder)."""
    from citeformer.generator import CiteGenerator

    if model is None:
        return CiteGenerator.default(progress=progress)
    if not Path(model).expanduser().exists() and _looks_like_path(model):
        raise InvalidInputError(
            f"model folder {model!r} does not exist (--model takes a local folder or a "
            "HuggingFace hub id such as HuggingFaceTB/SmolLM2-360M-Instruct)"
        )
    local = Path(model).expanduser()
    try:
        return CiteGenerator.from_pretrained(str(local) if local.exists() else model)
    except CiteformerError:
        raise
    except Exception as error:  # transformers raises OSError, ValueError, HF hub errors...
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ModelLoadError(f"could not load model {model!r}: {reason}") from error


def connect_server(url: str, model: str | None, engine: str) -> Any:
    """A ``ServerGenerator`` for the server at ``url``, checked to answer before any work."""
    from citeformer.remote import ServerGenerator

    generator = ServerGenerator(url, model, engine=engine)
    try:
        generator.check()
    except ServerResponseError as error:
        if error.status_code == 404:  # no OpenAI-compatible API there: the URL is wrong
            raise InvalidInputError(str(error)) from error
        raise
    return generator


def embed_texts(texts: Sequence[str]) -> list[list[float]]:
    """Unit-length all-MiniLM-L6-v2 embeddings (``citeformer.embeddings.embed``)."""
    from citeformer.embeddings import embed

    return embed(texts)


def _looks_like_path(model: str) -> bool:
    # A hub id is "name" or "owner/name"; anything else with a separator, or starting like a
    # path, is meant as a local folder.
    return (
        model.startswith((".", "/", "~"))
        or "\\" in model
        or model.count("/") > 1
        or os.path.isabs(model)
    )


# --------------------------------------------------------------------------------------------
# Arguments


def _positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not an integer") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {number}")
    return number


def _policy(value: str) -> str:
    try:
        return Policy.coerce(value).value
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def build_parser() -> argparse.ArgumentParser:
    from citeformer import __version__
    from citeformer.answers import DEFAULT_MAX_NEW_TOKENS
    from citeformer.remote import ENGINES

    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Answer questions from your documents with citation markers that always "
        "point at a retrieved passage.",
        epilog=f'Example: {PROG} ask "When was the Eiffel Tower completed?" --docs examples/docs',
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    ask = commands.add_parser(
        "ask",
        help="answer a question from local documents, with cited sources",
        description="Chunk the documents, retrieve the passages closest to the question "
        "(local all-MiniLM-L6-v2 embeddings), answer with the model under the citation "
        "policy, and print the answer followed by a numbered list of the cited passages "
        "(file and lines). Progress goes to stderr.",
        epilog="exit status: 0 ok, 2 bad input, 1 other failure. "
        f'Example: {PROG} ask "When was the Eiffel Tower completed?" --docs examples/docs',
    )
    ask.add_argument("question", help="the question to answer")
    ask.add_argument(
        "--docs", "-d", nargs="+", required=True, metavar="PATH",
        help="document files or folders (.txt and .md files, searched recursively), "
        "e.g. --docs examples/docs",
    )
    ask.add_argument(
        "--policy", "-p", type=_policy, default=Policy.REQUIRED.value,
        metavar="{" + ",".join(p.value for p in Policy) + "}",
        help="where citation markers are required: every sentence (required, the default), "
        "after quotes (quotes_only), or nowhere (auto)",
    )
    where = ask.add_mutually_exclusive_group()
    where.add_argument(
        "--model", "-m", default=None, metavar="NAME_OR_PATH",
        help="a HuggingFace causal LM: hub id or local folder (default: the embedded "
        "SmolLM2-135M-Instruct)",
    )
    where.add_argument(
        "--server", default=None, metavar="URL",
        help="answer with the model of an OpenAI-compatible server (llama.cpp, vLLM, SGLang), "
        "e.g. http://localhost:8080; the grammar is sent with the request. API key: "
        "$CITEFORMER_API_KEY or $OPENAI_API_KEY",
    )
    ask.add_argument(
        "--server-model", default=None, metavar="NAME",
        help="the served model's name (default: the first the server lists)",
    )
    ask.add_argument(
        "--engine", default="llama.cpp", choices=ENGINES,
        help="the server's engine, which decides the request field the grammar travels in "
        "(default: llama.cpp; vllm-guided is vLLM before 0.12)",
    )
    ask.add_argument(
        "--max-new-tokens", type=_positive_int, default=DEFAULT_MAX_NEW_TOKENS, metavar="N",
        help=f"most tokens to generate (default: {DEFAULT_MAX_NEW_TOKENS})",
    )
    ask.add_argument(
        "--top-k", "-k", type=_positive_int, default=retrieval.DEFAULT_TOP_K, metavar="K",
        help=f"passages to retrieve and give the model (default: {retrieval.DEFAULT_TOP_K})",
    )
    ask.add_argument(
        "--chunk-chars", type=_positive_int, default=retrieval.DEFAULT_MAX_CHARS, metavar="N",
        help=f"longest passage, in characters (default: {retrieval.DEFAULT_MAX_CHARS})",
    )
    output = ask.add_mutually_exclusive_group()
    output.add_argument(
        "--json", action="store_true",
        help="print one JSON object: text, citations and the retrieved sources",
    )
    output.add_argument("--stream", action="store_true", help="print the answer as it is generated")
    ask.add_argument(
        "--all-sources", action="store_true",
        help="list every retrieved passage in the references, marking the uncited ones",
    )
    ask.add_argument("--quiet", "-q", action="store_true", help="no progress messages on stderr")
    return parser


# --------------------------------------------------------------------------------------------
# Running


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``citeformer`` console script; returns the exit status."""
    try:
        parser = build_parser()
        try:
            args = parser.parse_args(argv)
            if args.command == "ask" and args.server is None and (
                args.server_model is not None or args.engine != "llama.cpp"
            ):
                parser.error("--server-model and --engine need --server URL")
        except SystemExit as exit_:
            return exit_.code if isinstance(exit_.code, int) else EXIT_USAGE
        if args.command is None:
            parser.print_help(sys.stderr)
            return EXIT_USAGE
        return _ask(args, sys.stdout)
    except KeyboardInterrupt:
        print(f"\n{PROG}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `citeformer ask ... | head`: stop quietly
        _silence_stdout()
        return EXIT_OK
    except (InvalidInputError, ServerConnectionError) as error:
        return _fail(error, EXIT_USAGE)
    except CiteformerError as error:
        return _fail(error, EXIT_FAILURE)
    except Exception as error:
        return _fail(error, EXIT_FAILURE, unexpected=True)


def _fail(error: BaseException, code: int, *, unexpected: bool = False) -> int:
    if os.environ.get("CITEFORMER_DEBUG"):
        import traceback

        traceback.print_exception(error)
    message = str(error) or type(error).__name__
    if unexpected:
        message = f"unexpected {type(error).__name__}: {message}"
    print(f"{PROG}: error: {message}", file=sys.stderr, flush=True)
    return code


def _silence_stdout() -> None:
    # Python flushes stdout at exit; with the reader gone that would fail again.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def _ask(args: argparse.Namespace, out: TextIO) -> int:
    say = _Progress(not args.quiet)
    if args.quiet:
        _silence_library_progress()
    question = args.question
    if not question.strip():
        raise EmptyQuestionError("the question is empty; ask something, e.g. "
                                 f'{PROG} ask "When was the Eiffel Tower completed?" --docs ...')

    documents = retrieval.load_documents(args.docs, warn=say_warning)
    passages = retrieval.chunk_documents(documents, args.chunk_chars)
    if not passages:  # load_documents rejects empty files, so this is only a safeguard
        raise retrieval.DocumentError("the documents contain no text")
    say(f"read {len(documents)} document(s): {len(passages)} passage(s) "
        f"of at most {args.chunk_chars} characters")

    if args.server is not None:
        say(f"connecting to the {args.engine} server at {args.server}")
        generator = connect_server(args.server, args.server_model, args.engine)
        say(f"the server answers with model {generator.model}")
    else:
        say(f"loading model {args.model or 'SmolLM2-135M-Instruct (embedded)'}")
        generator = load_generator(args.model, progress=not args.quiet)

    started = time.perf_counter()
    say(f"embedding {len(passages)} passage(s) with all-MiniLM-L6-v2")
    retriever = retrieval.DenseRetriever(passages, embed_texts, progress=_embed_progress(say))
    hits = retriever.search(question, args.top_k)
    say(f"retrieved {len(hits)} passage(s) in {time.perf_counter() - started:.1f}s; generating")

    sources = [hit.passage.to_source(score=round(hit.score, 4)) for hit in hits]
    options = {"max_new_tokens": args.max_new_tokens}
    if args.stream:
        stream = generator.stream(question, sources, args.policy, **options)
        for chunk in stream:
            out.write(chunk)
            out.flush()
        answer: CitedAnswer = stream.answer
        out.write("\n")
    else:
        answer = generator.generate(question, sources, args.policy, **options)

    if args.json:
        out.write(json.dumps(answer_json(answer, hits, question, args.policy), ensure_ascii=False))
        out.write("\n")
    else:
        if not args.stream:
            out.write(answer.text + "\n")
        out.write(format_references(answer, hits, all_sources=args.all_sources))
    out.flush()
    if answer.finish_reason == "length":
        say(f"the answer was cut off at --max-new-tokens {args.max_new_tokens}")
    return EXIT_OK


def _silence_library_progress() -> None:
    # transformers draws "Loading weights" bars for both models; --quiet means nothing on stderr.
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
    except ImportError:  # pragma: no cover - transformers is a dependency
        pass


def say_warning(message: str) -> None:
    print(f"{PROG}: warning: {message}", file=sys.stderr, flush=True)


def _embed_progress(say: Callable[[str], None]) -> Callable[[int, int], None]:
    def report(done: int, total: int) -> None:
        if total > 32:  # a single batch needs no running count
            say(f"embedded {done}/{total} passages")

    return report


def format_references(
    answer: CitedAnswer, hits: Sequence[retrieval.Hit], *, all_sources: bool = False
) -> str:
    """The numbered reference list printed under the answer.

    Numbers are the answer's marker numbers. Only cited sources are listed, in ascending order,
    unless ``all_sources``: then every retrieved passage is, uncited ones marked ``(not cited)``.
    """
    cited = sorted(set(answer.cited_ids))
    numbers = range(1, len(hits) + 1) if all_sources else cited
    lines = ["", "References:"]
    if not numbers:
        lines.append(f"(none cited; {len(hits)} passage(s) were retrieved, see --all-sources)")
    for number in numbers:
        note = "" if number in cited else " (not cited)"
        lines.append(f"[{number}] {hits[number - 1].passage.location}{note}")
    if answer.quotes:
        lines += ["", "Quotes (verbatim):"]
        for quote in answer.quotes:
            where = _quote_location(quote, hits[quote.source_id - 1].passage)
            lines.append(
                f'"{quote.text}" [{quote.source_id}] {where["path"]}, line {where["line"]}'
            )
    return "\n".join(lines) + "\n"


def _quote_location(quote: Quote, passage: retrieval.Passage) -> dict[str, Any]:
    # Source offsets are into the passage text, which is the file's text from passage.start.
    return {
        "path": passage.path,
        "file_start": passage.start + quote.source_start,
        "file_end": passage.start + quote.source_end,
        "line": passage.line_start + passage.text.count("\n", 0, quote.source_start),
    }


def answer_json(
    answer: CitedAnswer, hits: Sequence[retrieval.Hit], question: str, policy: str
) -> dict[str, Any]:
    """The ``--json`` object; ``sources`` are all retrieved passages, ``id`` their marker number."""
    cited = set(answer.cited_ids)
    return {
        "question": question,
        "policy": policy,
        "text": answer.text,
        "citations": [
            {"source_id": c.source_id, "start": c.start, "end": c.end} for c in answer.citations
        ],
        "sources": [
            {
                "id": number,
                "path": hit.passage.path,
                "title": Path(hit.passage.path).name,
                "text": hit.passage.text,
                "start": hit.passage.start,
                "end": hit.passage.end,
                "line_start": hit.passage.line_start,
                "line_end": hit.passage.line_end,
                "score": round(hit.score, 4),
                "cited": number in cited,
            }
            for number, hit in enumerate(hits, start=1)
        ],
        "quotes": [
            {
                "text": q.text, "source_id": q.source_id, "start": q.start, "end": q.end,
                **_quote_location(q, hits[q.source_id - 1].passage),
            }
            for q in answer.quotes
        ],
        "finish_reason": answer.finish_reason,
        "prompt_tokens": answer.prompt_tokens,
        "generated_tokens": answer.generated_tokens,
    }
