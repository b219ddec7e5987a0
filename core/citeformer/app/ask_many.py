"""``citeformer ask --questions FILE``: many questions against the same documents, as JSON lines.

The documents are read, the model loaded and the passages embedded once; then the questions are
taken ``--batch-size`` at a time, in file order: each is embedded and gets its own top-k passages,
and the batch is answered together. A generator with ``answer_batch`` (``CiteGenerator``) decodes
the batch in one padded batch; a server (``--server``) gets the batch's requests side by side, one
thread each, so the engine can batch them on its side; any other generator answers them one
after another. Each batch's lines are written (and flushed) as soon as it is done, so an
interrupted run keeps the answers it has.

Every non-blank line of the file gives one output line, in order: the ``--json`` object of its
answer with ``line`` (its line number) in front, or ``{"line", "question", "error"}`` for a line
that could not be answered (not JSON in a ``.jsonl`` file, a blank question, a prompt too long
for the model, a server error...). Those are also warned about on stderr as they happen, and
once everything is written the command ends with ``QuestionsFailed`` (exit status 1).
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol, TextIO, runtime_checkable

from citeformer import AnswerGenerator, CitedAnswer, CiteformerError, build_request
from citeformer.app.ask import (
    AskOptions,
    Progress,
    index_passages,
    load_passages,
    open_generator,
    silence_library_progress,
)
from citeformer.app.errors import PROG, InputError, QuestionsFailed
from citeformer.app.output import answer_json
from citeformer.app.questions import QuestionLine, read_questions
from citeformer.app.retrieval import DenseRetriever, Hit
from citeformer.app.services import Services
from citeformer.request import GenerationRequest

__all__ = [
    "BatchAnswerGenerator",
    "BatchAnswerer",
    "Outcome",
    "ProgressBar",
    "ask_many",
]

Outcome = CitedAnswer | CiteformerError
"""What one request came to: its answer, or the error that stopped it."""


@runtime_checkable
class BatchAnswerGenerator(Protocol):
    """A generator that answers many requests in one call (``CiteGenerator``)."""

    def answer_batch(
        self, requests: Sequence[GenerationRequest], *, batch_size: int
    ) -> list[CitedAnswer]:
        """The answers to ``requests``, in their order, decoded ``batch_size`` at once."""
        ...


def ask_many(options: AskOptions, services: Services, out: TextIO) -> int:
    """Answer every question of ``options.questions``; write JSON lines on ``out`` or the file.

    Returns the number of questions answered. Raises ``QuestionsFailed`` at the end if any line
    could not be answered (each has its error object in the output).
    """
    if options.questions is None:
        raise InputError("ask_many() needs options.questions: the file of questions to answer")
    say = Progress(not options.quiet)
    if options.quiet:
        silence_library_progress()
    items = read_questions(options.questions)
    with _output(options, out) as sink:
        failed = _answer_all(items, options, services, sink, say)
    if failed:
        raise QuestionsFailed(failed, len(items))
    return len(items)


class ProgressBar:
    """A tqdm bar on stderr that moves one step per answer written; silenced by ``--quiet``.

    ``citeformer:  40%|####      | 8/20 [00:15<00:23,  1.9s/question, 1 failed]``: the share
    done, the time so far and left, the time per question and the lines that failed.
    """

    def __init__(
        self, total: int, *, enabled: bool, stream: TextIO | None = None,
        redraw_s: float = 0.1,
    ) -> None:
        from tqdm import tqdm

        # ``redraw_s``: the shortest time between two redraws (tqdm's mininterval).
        self._bar = tqdm(
            total=total, desc=PROG, unit="question", file=stream or sys.stderr,
            disable=not enabled, dynamic_ncols=True, mininterval=redraw_s, miniters=1,
        )
        self._failed = 0

    def advance(self, *, failed: bool = False) -> None:
        """One more question written, ``failed`` if as an error object."""
        if failed:
            self._failed += 1
            self._bar.set_postfix_str(f"{self._failed} failed", refresh=False)
        self._bar.update(1)

    def close(self) -> None:
        """End the bar's line."""
        self._bar.close()


class BatchAnswerer:
    """Answers a batch of requests the best way the generator allows (see the module docstring).

    One request's error never costs the others their answers: it comes back in its place.
    """

    def __init__(
        self, generator: AnswerGenerator, *, batch_size: int, side_by_side: bool
    ) -> None:
        self.generator = generator
        self.batch_size = batch_size
        self._pool = (
            ThreadPoolExecutor(max_workers=batch_size, thread_name_prefix=PROG)
            if side_by_side and not isinstance(generator, BatchAnswerGenerator) else None
        )

    def answer(self, requests: Sequence[GenerationRequest]) -> list[Outcome]:
        """The outcome of each request, in their order."""
        if not requests:
            return []
        if isinstance(self.generator, BatchAnswerGenerator):
            try:
                return list(self.generator.answer_batch(requests, batch_size=self.batch_size))
            except CiteformerError as error:
                if len(requests) == 1:
                    return [error]
                # answer_batch refuses a whole batch for one bad row (a prompt too long):
                # answered one by one, the others still get their answers.
                return [self._one(request) for request in requests]
        if self._pool is not None:
            return list(self._pool.map(self._one, requests))
        return [self._one(request) for request in requests]

    def close(self) -> None:
        """Stop the threads; requests not yet sent are dropped (Ctrl-C ends quickly)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def _one(self, request: GenerationRequest) -> Outcome:
        try:
            return self.generator.answer(request)
        except CiteformerError as error:
            return error


def _answer_all(
    items: list[QuestionLine], options: AskOptions, services: Services, out: TextIO,
    say: Progress,
) -> list[int]:
    """Write one line per item on ``out``; the line numbers of the failed ones."""
    retriever: DenseRetriever | None = None
    answerer: BatchAnswerer | None = None
    if any(item.error is None for item in items):  # else there is nothing to load a model for
        passages = load_passages(options, services, say)
        generator = open_generator(options, services, say)
        retriever = index_passages(passages, options, services, say)
        answerer = BatchAnswerer(
            generator, batch_size=options.batch_size, side_by_side=options.server is not None
        )
        say(f"answering {len(items)} question(s), {options.batch_size} at a time")
    bar = ProgressBar(len(items), enabled=not options.quiet)
    failed: list[int] = []
    try:
        for first in range(0, len(items), options.batch_size):
            chunk = items[first:first + options.batch_size]
            found = _guarded_batch(chunk, options, retriever, answerer)
            for item, data in zip(chunk, found, strict=True):
                if "error" in data:
                    failed.append(item.line)
                    services.warn(f"line {item.line}: {data['error']}")
                _write_line(out, data)
                out.flush()  # each line on disk as it is written: a crash loses none of them
                bar.advance(failed="error" in data)
    finally:
        bar.close()
        if answerer is not None:
            answerer.close()
    return failed


def _guarded_batch(
    chunk: list[QuestionLine], options: AskOptions, retriever: DenseRetriever | None,
    answerer: BatchAnswerer | None,
) -> list[dict[str, Any]]:
    """``_batch``, where an unexpected error costs only the line that raised it.

    A batch that raises is answered again line by line; a line that raises alone gets its error
    object (the error's type and message), and every other line its answer.
    """
    try:
        return _batch(chunk, options, retriever, answerer)
    except Exception as error:
        if len(chunk) == 1:
            return [_error(chunk[0], f"unexpected {type(error).__name__}: {error}")]
        return [_guarded_batch([item], options, retriever, answerer)[0] for item in chunk]


def _write_line(out: TextIO, data: dict[str, Any]) -> None:
    """One JSON line; characters the output cannot encode are written as JSON escapes."""
    try:
        out.write(json.dumps(data, ensure_ascii=False) + "\n")
    except UnicodeEncodeError:
        out.write(json.dumps(data) + "\n")


def _batch(
    chunk: list[QuestionLine], options: AskOptions, retriever: DenseRetriever | None,
    answerer: BatchAnswerer | None,
) -> list[dict[str, Any]]:
    """The output object of each item of ``chunk``: its answer, or its error."""
    results = {item.line: _error(item, item.error) for item in chunk if item.error is not None}
    questions = [(item, item.question) for item in chunk if item.error is None and item.question]
    asked: list[tuple[QuestionLine, str, list[Hit], GenerationRequest]] = []
    if questions and retriever is not None and answerer is not None:
        found = retriever.search_many([question for _, question in questions], options.top_k)
        for (item, question), hits in zip(questions, found, strict=True):
            sources = [hit.passage.to_source(score=round(hit.score, 4)) for hit in hits]
            try:
                request = build_request(
                    question, sources, options.policy, max_new_tokens=options.max_new_tokens,
                    refusal=options.refusal,
                )
            except CiteformerError as error:
                results[item.line] = _error(item, str(error))
                continue
            asked.append((item, question, hits, request))
        outcomes = answerer.answer([request for *_, request in asked])
        for (item, _, hits, request), outcome in zip(asked, outcomes, strict=True):
            if isinstance(outcome, CiteformerError):
                results[item.line] = _error(item, str(outcome) or type(outcome).__name__)
            else:
                data = answer_json(outcome, hits, request, options.policy)
                results[item.line] = {"line": item.line, **data}
    return [results[item.line] for item in chunk]


def _error(item: QuestionLine, message: str) -> dict[str, Any]:
    return {"line": item.line, "question": item.question, "error": message}


@contextlib.contextmanager
def _output(options: AskOptions, out: TextIO) -> Iterator[TextIO]:
    """``--output FILE`` opened for writing, or ``out``."""
    if options.output_file is None:
        yield out
        return
    target = Path(options.output_file)
    if options.questions is not None and _same_file(target, Path(options.questions)):
        raise InputError(
            f"--output {options.output_file!r} is the questions file itself; writing there "
            "would overwrite the questions, so name another file"
        )
    try:
        stream = target.open("w", encoding="utf-8")
    except OSError as error:
        raise InputError(
            f"cannot write the answers to {options.output_file!r}: {error.strerror or error}"
        ) from None
    with stream:
        yield stream


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and a.samefile(b)
    except OSError:
        return False
