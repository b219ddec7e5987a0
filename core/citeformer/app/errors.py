"""Errors of the command line, each with the exit status it ends the command with.

The tree::

    CiteformerError
    └── AppError                exit 1: the command failed
        ├── UsageError          exit 2: the arguments do not parse (shown under the usage line)
        ├── InputError          exit 2: an input cannot be used (also an InvalidInputError)
        │   └── DocumentError   a --docs path: missing, unreadable, or a file with no text
        ├── QuestionsFailed     exit 1: some questions of --questions got an error object
        └── Interrupted         exit 130: Ctrl-C

``as_app_error`` is the one place that decides how any other exception ends the command: the
library's input errors and an unreachable server are the user's to fix (2), its other errors
are failures (1), anything else is an unexpected failure (1).
"""

from __future__ import annotations

import sys
from typing import ClassVar, TextIO

from citeformer import CiteformerError, InvalidInputError, ServerConnectionError

__all__ = [
    "EXIT_FAILURE",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "PROG",
    "AppError",
    "DocumentError",
    "InputError",
    "Interrupted",
    "QuestionsFailed",
    "UsageError",
    "as_app_error",
]

PROG = "citeformer"
EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class AppError(CiteformerError):
    """An error that ends the command: ``show()`` prints it, ``exit_code`` is the status."""

    exit_code: ClassVar[int] = EXIT_FAILURE

    def format_message(self) -> str:
        """The message after ``citeformer: error:``."""
        return str(self) or type(self).__name__

    def show(self, file: TextIO | None = None) -> None:
        """Print ``citeformer: error: <message>`` on ``file`` (default: stderr)."""
        print(f"{PROG}: error: {self.format_message()}", file=file or sys.stderr, flush=True)


class UsageError(AppError):
    """The command line does not parse; shown as argparse does, under the usage line."""

    exit_code = EXIT_USAGE

    def __init__(self, message: str, *, usage: str = "", prog: str = PROG) -> None:
        super().__init__(message)
        self.usage = usage
        """The usage line of the (sub)command, as argparse formats it."""
        self.prog = prog
        """The (sub)command the error is about, e.g. ``citeformer ask``."""

    def show(self, file: TextIO | None = None) -> None:
        """Print the usage line, then ``<prog>: error: <message>``."""
        stream = file or sys.stderr
        stream.write(self.usage)
        print(f"{self.prog}: error: {self.format_message()}", file=stream, flush=True)


class InputError(AppError, InvalidInputError):
    """An input of the command cannot be used as given.

    A document, the question, a model path, a server URL.
    """

    exit_code = EXIT_USAGE


class DocumentError(InputError):
    """A document path cannot be used.

    It is missing, a symlink loop, unreadable, a folder with no documents, or a file that is
    binary, not UTF-8, empty, a PDF that is encrypted, corrupt or holds no text, or a PDF while
    pypdf is not installed.
    """


class QuestionsFailed(AppError):
    """Some questions of a ``--questions`` file were not answered; the others were.

    Raised once every answer is written, so the output holds one line per question, the failed
    ones as ``{"line": ..., "error": ...}`` objects.
    """

    def __init__(self, failed: list[int], total: int) -> None:
        lines = ", ".join(map(str, failed[:20])) + (", ..." if len(failed) > 20 else "")
        super().__init__(
            f"{len(failed)} of {total} question(s) could not be answered (line(s) {lines}); "
            'each has an "error" object in its place in the output'
        )
        self.failed = failed
        """The line numbers of the questions that failed."""


class Interrupted(AppError):
    """The user pressed Ctrl-C."""

    exit_code = EXIT_INTERRUPTED

    def __init__(self) -> None:
        super().__init__("interrupted")

    def show(self, file: TextIO | None = None) -> None:
        """Print ``citeformer: interrupted`` on a line of its own."""
        print(f"\n{PROG}: interrupted", file=file or sys.stderr, flush=True)


def as_app_error(error: BaseException) -> AppError:
    """How ``error`` ends the command: itself if it is an ``AppError``, else one that says it."""
    if isinstance(error, AppError):
        return error
    if isinstance(error, KeyboardInterrupt):
        converted: AppError = Interrupted()
    elif isinstance(error, (InvalidInputError, ServerConnectionError)):
        converted = InputError(str(error))
    elif isinstance(error, CiteformerError):
        converted = AppError(str(error))
    else:
        message = str(error) or type(error).__name__
        converted = AppError(f"unexpected {type(error).__name__}: {message}")
    converted.__cause__ = error
    return converted
