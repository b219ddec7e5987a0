r"""The ``citeformer`` command: its arguments, and how it ends.

``citeformer ask "QUESTION" --docs PATH...`` loads the documents at PATH (files or folders of
``.txt``, ``.md``, ``.html``/``.htm`` and ``.pdf`` files), cuts them into passages, retrieves the
top-k passages with local all-MiniLM-L6-v2 embeddings, answers with the embedded
SmolLM2-135M-Instruct (or ``--model``) under the chosen citation policy, and prints the answer
followed by a numbered reference list, each cited passage with the sentence that supports the
claim citing it::

    $ citeformer ask "When was the Eiffel Tower completed?" --docs examples/docs
    The Eiffel Tower was completed on 31 March 1889 [2].

    References:
    [2] examples/docs/eiffel_tower.md, line 5
        examples/docs/eiffel_tower.md, line 5: "Construction of the Eiffel Tower began in January
        1887, and the tower was completed on 31 March 1889, when Gustave Eiffel climbed to the top
        and raised the…"

(the supporting sentence is one line, cut at 160 characters; ``(weak support)`` follows it when
the passage shares little of the claim's wording, and a PDF's passages read ``report.pdf, page 3``
and ``report.pdf, page 3, line 12: "..."``).

``--questions FILE`` answers every question of FILE (one per line, or JSON lines) against the same
documents and writes one JSON answer per line (``citeformer.app.ask_many``).

The passage embeddings are kept in citeformer's cache folder (``citeformer.app.index_cache``), so
a second question over the same documents embeds only the files that changed since;
``--no-index-cache`` embeds everything afresh and keeps nothing. ``--device`` and ``--dtype`` say
where and in what floating-point type the model runs (default: CUDA when there is one, else the
CPU; bfloat16 where it is computed natively, else float32).

With ``--server URL`` the answer comes from a llama.cpp, vLLM or SGLang server instead of a model
in this process (``--engine`` names which, ``--server-model`` the served model); the grammar travels
with the request and every marker is checked again here::

    $ citeformer ask "When was the Eiffel Tower completed?" --docs examples/docs \
        --server http://localhost:8080

The reference list shows the sources the answer cites, by their marker number, in ascending
order; retrieved passages that are not cited are left out unless ``--all-sources`` is given.
Progress and warnings go to stderr, so stdout holds only the answer (or, with ``--json``, one JSON
object). Exit codes (``citeformer.app.errors``): 0 success, 2 bad input (usage errors, missing or
unreadable documents, an empty question, a model path that does not exist, a server URL that is
malformed or cannot be reached), 1 any other failure (with ``--questions``: some question could not
be answered, its line holding an error object), 130 interrupted. Errors print as
``citeformer: error: ...`` without a traceback (set ``CITEFORMER_DEBUG=1`` to get one).
"""  # noqa: D214 - "References:" is a line of the example output, not a docstring section

from __future__ import annotations

import argparse
import atexit
import contextlib
import os
import sys
import threading
from collections.abc import Sequence
from typing import NoReturn

from citeformer import Policy
from citeformer.app.ask import (
    DEFAULT_ENGINE,
    DTYPE_CHOICES,
    ENGINE_CHOICES,
    AskOptions,
    ask,
    library_logging_shown,
    library_warnings_to,
)
from citeformer.app.ask_many import ask_many
from citeformer.app.chunking import DEFAULT_MAX_CHARS
from citeformer.app.errors import EXIT_OK, EXIT_USAGE, PROG, UsageError, as_app_error
from citeformer.app.retrieval import DEFAULT_TOP_K
from citeformer.app.services import Services
from citeformer.evidence.refusal import DEFAULT_REFUSAL_TEXT, DEFAULT_THRESHOLDS, Refusal
from citeformer.request import DEFAULT_BATCH_SIZE, DEFAULT_MAX_NEW_TOKENS

__all__ = [
    "main",
    "run",
]


def main(argv: Sequence[str] | None = None, *, services: Services | None = None) -> int:
    """Run the ``citeformer`` command with ``argv`` and return its exit status.

    ``argv`` defaults to ``sys.argv[1:]``; ``services`` are what it loads models, connects,
    embeds and warns with (default: the real ones).
    """
    services = services or Services()
    try:
        parser, ask_parser = _parsers()
        try:
            args = parser.parse_args(argv)
        except SystemExit as exit_:  # --help and --version print, then exit 0
            return exit_.code if isinstance(exit_.code, int) else EXIT_OK
        if args.command is None:
            parser.print_help(sys.stderr)
            return EXIT_USAGE
        _check_combinations(args, ask_parser)
        _check_device(args.device)
        options = _options(args)
        with library_warnings_to(services.warn), library_logging_shown(shown=not options.quiet):
            if options.questions is not None:
                ask_many(options, services, sys.stdout)
            else:
                ask(options, services, sys.stdout)
        return EXIT_OK
    except BrokenPipeError:  # `citeformer ask ... | head`: stop quietly
        _silence_stdout()
        return EXIT_OK
    except (Exception, KeyboardInterrupt) as error:
        failure = as_app_error(error)
        if os.environ.get("CITEFORMER_DEBUG"):
            import traceback

            traceback.print_exception(error)
        failure.show()
        return failure.exit_code


def run() -> NoReturn:
    """The ``citeformer`` script and ``python -m citeformer``: ``main()``, then the process ends.

    It ends as Python's own exit does (other threads joined, exit handlers run, stdout and stderr
    flushed), but without tearing down the interpreter module by module, which after a run that
    loaded torch and transformers takes about 1.2 s of the command's wall time.
    """
    code = main()
    current = threading.current_thread()
    for thread in threading.enumerate():
        if thread is not current and not thread.daemon:
            thread.join()
    try:
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            # Closed, or its reader gone: nothing is left to say there.
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
    os._exit(code)


class _Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` that raises ``UsageError`` rather than exiting.

    So ``main`` alone decides how the command ends.
    """

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, usage=self.format_usage(), prog=self.prog)


def _parsers() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    from citeformer import __version__

    parser = _Parser(
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
        "(file and lines, or page), each with the sentence that supports the claim. "
        "Progress goes to stderr.",
        epilog="exit status: 0 ok, 2 bad input, 1 other failure (with --questions: a question "
        "that got an error object). "
        f'Example: {PROG} ask "When was the Eiffel Tower completed?" --docs examples/docs',
    )
    ask.add_argument(
        "question", nargs="?", default=None,
        help="the question to answer (or --questions FILE)",
    )
    ask.add_argument(
        "--docs", "-d", nargs="+", required=True, metavar="PATH",
        help="document files or folders (.txt, .md, .html, .htm and .pdf files, searched "
        "recursively; PDF needs pip install pypdf), e.g. --docs examples/docs",
    )
    many = ask.add_argument_group("many questions")
    many.add_argument(
        "--questions", default=None, metavar="FILE",
        help="answer every question of FILE (one per line; a .jsonl file: one "
        '{"question": "..."} per line; - is stdin) and write one JSON answer per line, '
        "with its line number; a line that fails gets an error object and the exit status "
        "is 1",
    )
    many.add_argument(
        "--output", "-o", default=None, metavar="FILE",
        help="write the --questions answers to FILE instead of stdout",
    )
    many.add_argument(
        "--batch-size", type=_positive_int, default=None, metavar="N",
        help="questions answered together: one batch of the local model, or requests in "
        f"flight to a --server (default: {DEFAULT_BATCH_SIZE})",
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
        "--device", default=None, metavar="DEVICE",
        help="the torch device the model runs on: cpu, cuda, cuda:1, mps (default: CUDA when "
        "there is one, else cpu); not with --server",
    )
    ask.add_argument(
        "--dtype", default=None, choices=DTYPE_CHOICES,
        help="the model's floating-point type (default: auto, bfloat16 where the CPU or GPU "
        "computes it natively, float16 on a GPU without bfloat16, else float32; "
        "$CITEFORMER_DTYPE replaces auto); not with --server",
    )
    ask.add_argument(
        "--server-model", default=None, metavar="NAME",
        help="the served model's name (default: the first the server lists)",
    )
    ask.add_argument(
        "--engine", default=DEFAULT_ENGINE, choices=ENGINE_CHOICES,
        help=f"the server's engine, which decides the request field the grammar travels in "
        f"(default: {DEFAULT_ENGINE}; vllm-guided is vLLM before 0.12)",
    )
    ask.add_argument(
        "--max-new-tokens", type=_positive_int, default=DEFAULT_MAX_NEW_TOKENS, metavar="N",
        help=f"most tokens to generate (default: {DEFAULT_MAX_NEW_TOKENS})",
    )
    ask.add_argument(
        "--top-k", "-k", type=_positive_int, default=DEFAULT_TOP_K, metavar="K",
        help=f"passages to retrieve and give the model (default: {DEFAULT_TOP_K})",
    )
    ask.add_argument(
        "--chunk-chars", type=_positive_int, default=DEFAULT_MAX_CHARS, metavar="N",
        help=f"longest passage, in characters (default: {DEFAULT_MAX_CHARS})",
    )
    ask.add_argument(
        "--no-index-cache", action="store_true",
        help="embed every passage and keep nothing; by default the passage embeddings are "
        "kept in the index folder of citeformer's cache ($CITEFORMER_CACHE, else "
        "~/.cache/citeformer), so that the next question over the same documents embeds only "
        "the files that changed",
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
    refusal = ask.add_mutually_exclusive_group()
    refusal.add_argument(
        "--refusal-threshold", type=_non_negative_float, default=None, metavar="X",
        help=f"answer {DEFAULT_REFUSAL_TEXT!r} when no passage, or pair of passages, holds this "
        f"share of the question's content words (default: {DEFAULT_THRESHOLDS['lexical']}; "
        "0: never)",
    )
    refusal.add_argument(
        "--no-refusal", action="store_true",
        help="answer every question with citations, even where the passages do not answer it",
    )
    ask.add_argument("--quiet", "-q", action="store_true", help="no progress messages on stderr")
    return parser, ask


def _non_negative_float(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
    if not number >= 0:
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {value}")
    return number


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


def _check_combinations(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """The rules between options that argparse cannot say (``parser.error`` exits 2)."""
    if args.server is None and (args.server_model is not None or args.engine != DEFAULT_ENGINE):
        parser.error("--server-model and --engine need --server URL")
    if args.server is not None:
        for name, value in (("--device", args.device), ("--dtype", args.dtype)):
            if value is not None:
                parser.error(f"{name} sets how a model runs in this process (the embedded one "
                             "or --model); with --server URL the server decides that")
    if args.questions is None:
        if args.question is None:
            parser.error("give a QUESTION (before --docs, which takes every word after it "
                         "as a path), or --questions FILE")
        for name, value in (("--output", args.output), ("--batch-size", args.batch_size)):
            if value is not None:
                parser.error(f"{name} needs --questions FILE")
    else:
        if args.question is not None:
            parser.error(f"give a QUESTION or --questions FILE, not both (got {args.question!r})")
        if args.stream:
            parser.error("--stream prints one answer as it comes; --questions writes JSON lines")


def _check_device(device: str | None) -> None:
    """End the command before any work if torch cannot use ``--device`` (exit 2)."""
    if device is not None:
        from citeformer.decoding.precision import resolve_device  # imports torch

        resolve_device(device)


def _options(args: argparse.Namespace) -> AskOptions:
    return AskOptions(
        question=args.question,
        docs=tuple(args.docs),
        policy=args.policy,
        model=args.model,
        device=args.device,
        dtype=args.dtype or "auto",
        server=args.server,
        server_model=args.server_model,
        engine=args.engine,
        max_new_tokens=args.max_new_tokens,
        top_k=args.top_k,
        chunk_chars=args.chunk_chars,
        index_cache=not args.no_index_cache,
        output="json" if args.json else "stream" if args.stream else "text",
        all_sources=args.all_sources,
        quiet=args.quiet,
        questions=args.questions,
        output_file=args.output,
        batch_size=args.batch_size or DEFAULT_BATCH_SIZE,
        refusal=None if args.no_refusal else Refusal(threshold=args.refusal_threshold),
    )


def _silence_stdout() -> None:
    # Python flushes stdout at exit; with the reader gone that would fail again.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
