"""Unit tests for citeformer.app.errors: each error's exit status and how it is shown."""

from __future__ import annotations

import io

import pytest

from citeformer import (
    CiteformerError,
    EmptyQuestionError,
    GrammarViolationError,
    InvalidInputError,
    ModelLoadError,
    ServerConnectionError,
    ServerResponseError,
)
from citeformer.app.errors import (
    AppError,
    InputError,
    Interrupted,
    UsageError,
    as_app_error,
)


@pytest.mark.parametrize(
    ("error", "code", "message"),
    [
        (InputError("bad path"), 2, "bad path"),
        (UsageError("no such option"), 2, "no such option"),
        (AppError("it failed"), 1, "it failed"),
        (KeyboardInterrupt(), 130, "interrupted"),
        (EmptyQuestionError("the question is empty"), 2, "the question is empty"),
        (ServerConnectionError("could not reach"), 2, "could not reach"),
        (ServerResponseError("HTTP 500", status_code=500), 1, "HTTP 500"),
        (ModelLoadError("no model"), 1, "no model"),
        (GrammarViolationError("marker [7]"), 1, "marker [7]"),
        (RuntimeError("kaput"), 1, "unexpected RuntimeError: kaput"),
        (ValueError(), 1, "unexpected ValueError: ValueError"),
    ],
)
def test_every_error_gets_one_exit_status(error: BaseException, code: int, message: str) -> None:
    failure = as_app_error(error)
    assert isinstance(failure, AppError) and isinstance(failure, CiteformerError)
    assert failure.exit_code == code
    assert failure.format_message() == message
    if not isinstance(error, AppError):
        assert failure.__cause__ is error  # the traceback CITEFORMER_DEBUG prints


def test_errors_show_themselves() -> None:
    shown = io.StringIO()
    AppError("it failed").show(shown)
    Interrupted().show(shown)
    UsageError("bad", usage="usage: citeformer ask [-h]\n", prog="citeformer ask").show(shown)
    assert shown.getvalue() == (
        "citeformer: error: it failed\n"
        "\nciteformer: interrupted\n"
        "usage: citeformer ask [-h]\nciteformer ask: error: bad\n"
    )


def test_input_errors_are_invalid_input_errors() -> None:
    assert issubclass(InputError, InvalidInputError)
    assert issubclass(InputError, ValueError)
