"""Reading the file of ``citeformer ask --questions FILE``: one question per line, or JSON lines.

A ``.jsonl`` (or ``.ndjson``) file holds one JSON object per line with a ``"question"`` string;
any other file (``-`` is stdin) holds one question per line. Blank lines are skipped in both. A
line that cannot be used (not JSON, no ``"question"`` string, a blank question) does not stop the
others: it becomes a ``QuestionLine`` with an ``error``, reported in its place in the output.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from citeformer.app.errors import InputError
from citeformer.errors import InvalidInputError
from citeformer.request import check_encodable

__all__ = [
    "JSON_LINES_SUFFIXES",
    "STDIN",
    "QuestionLine",
    "read_questions",
]

JSON_LINES_SUFFIXES = (".jsonl", ".ndjson")
STDIN = "-"


@dataclass(frozen=True)
class QuestionLine:
    """One non-blank line of a questions file: its question, or why it has none."""

    line: int
    """1-based line number in the file."""
    question: str | None
    """The question; ``None`` when the line holds none that can be read."""
    error: str | None = None
    """Why the line cannot be answered (without its line number); ``None`` if it can be."""


def read_questions(path: str, *, stdin: TextIO | None = None) -> list[QuestionLine]:
    """The questions of the file at ``path`` (``-``: ``stdin``, default ``sys.stdin``).

    Raises ``InputError`` when the file cannot be read or holds no non-blank line.
    """
    text = _read(path, stdin)
    json_lines = Path(path).suffix.lower() in JSON_LINES_SUFFIXES
    parse = _json_line if json_lines else _text_line
    items = [
        parse(number, line)
        # Split at "\n" alone, so line numbers are an editor's (splitlines also splits at
        # form feeds and Unicode line separators).
        for number, line in enumerate(text.split("\n"), start=1)
        if line.strip()
    ]
    if not items:
        shown = "stdin" if path == STDIN else repr(path)
        raise InputError(
            f"the questions file {shown} has no questions; write one question per line"
            + (' (JSON lines: {"question": "..."})' if json_lines else "")
        )
    return items


def _read(path: str, stdin: TextIO | None) -> str:
    if path == STDIN:
        return (stdin or sys.stdin).read()
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise InputError(f"the questions file {path!r} does not exist") from None
    except IsADirectoryError:
        raise InputError(
            f"the questions file {path!r} is a folder; give a file with one question per line"
        ) from None
    except OSError as error:
        raise InputError(
            f"the questions file {path!r} cannot be read: {error.strerror or error}"
        ) from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise InputError(
            f"the questions file {path!r} is not UTF-8 text (undecodable byte at offset "
            f"{error.start}); convert it to UTF-8"
        ) from None


def _text_line(number: int, line: str) -> QuestionLine:
    return QuestionLine(number, line.strip())


def _json_line(number: int, line: str) -> QuestionLine:
    try:
        data = json.loads(line)
    except json.JSONDecodeError as error:
        return QuestionLine(number, None, f"not JSON ({error.msg} at column {error.colno}); "
                                          'write {"question": "..."}')
    except RecursionError:  # arrays or objects nested thousands deep
        return QuestionLine(number, None, 'JSON nested too deeply to read; write '
                                          '{"question": "..."}')
    question = data.get("question") if isinstance(data, dict) else None
    if not isinstance(question, str):
        return QuestionLine(number, None, 'no "question" string; write {"question": "..."}')
    if not question.strip():
        return QuestionLine(number, question, "the question is empty")
    try:
        check_encodable("the question", question)
    except InvalidInputError as error:
        # The question cannot be written back as UTF-8 either: its characters are escaped.
        shown = question.encode("utf-8", "backslashreplace").decode()
        return QuestionLine(number, shown, str(error))
    return QuestionLine(number, question)
