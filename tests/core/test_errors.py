"""The range checks every option goes through, and how a bad value is shown."""

from __future__ import annotations

import math

import pytest

from citeformer.errors import (
    CiteformerError,
    InputTypeError,
    InvalidInputError,
    check_float,
    check_int,
    shown,
)

HUGE_INT = 10**400


def _id(value: object) -> str | None:
    """A test id: huge ints by their length (pytest would print them whole, or fail to)."""
    return shown(value) if isinstance(value, int) else None


@pytest.mark.parametrize(("value", "error", "message"), [
    (-1, InvalidInputError, "n must be an int from 0 to 10, got -1"),
    (11, InvalidInputError, "n must be an int from 0 to 10, got 11"),
    (HUGE_INT, InvalidInputError, "n must be an int from 0 to 10, got an int of about 401 digits"),
    (-HUGE_INT, InvalidInputError, "got -an int of about 401 digits"),
    (10**5000, InvalidInputError, "got an int of about 5001 digits"),  # past str()'s limit
    (True, InputTypeError, "n must be an int from 0 to 10, got bool True"),
    (2.0, InputTypeError, "got float 2.0"),
    ("3", InputTypeError, "got str '3'"),
], ids=_id)
def test_check_int_refuses_what_is_out_of_range(
    value: object, error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as raised:
        check_int("n", value, 0, 10)
    assert message in str(raised.value)
    assert isinstance(raised.value, CiteformerError) and isinstance(raised.value, ValueError)


def test_check_int_keeps_its_bounds() -> None:
    assert [check_int("n", value, 0, 10) for value in (0, 10)] == [0, 10]


@pytest.mark.parametrize(("value", "error", "message"), [
    (-0.5, InvalidInputError, "w must be a finite number >= 0 and <= 10000, got -0.5"),
    (1e308, InvalidInputError, "w must be a finite number >= 0 and <= 10000, got 1e+308"),
    (HUGE_INT, InvalidInputError, "got an int of about 401 digits"),
    (math.nan, InvalidInputError, "got nan"),
    (math.inf, InvalidInputError, "got inf"),
    (-math.inf, InvalidInputError, "got -inf"),
    (False, InputTypeError, "w must be a number, got bool False"),
    (None, InputTypeError, "w must be a number, got NoneType None"),
    ("x" * 500, InputTypeError, "got str 'xxxx"),
], ids=_id)
def test_check_float_refuses_what_is_out_of_range(
    value: object, error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as raised:
        check_float("w", value, 0.0, 1e4)
    assert message in str(raised.value)
    assert len(str(raised.value)) < 200
    assert isinstance(raised.value, CiteformerError) and isinstance(raised.value, ValueError)


def test_check_float_keeps_its_bounds_and_returns_a_float() -> None:
    assert check_float("w", 0, 0.0, 1e4) == 0.0 and isinstance(check_float("w", 3, 0, 5), float)
    assert check_float("w", 1e4, 0.0, 1e4) == 1e4
    assert check_float("w", 1e-9, 0.0, 1.0, above=True) == 1e-9
    with pytest.raises(InvalidInputError, match="w must be a finite number > 0 and <= 1, got 0"):
        check_float("w", 0, 0.0, 1.0, above=True)


def test_shown_cuts_long_values() -> None:
    assert shown(2**64 - 1) == "18446744073709551615"
    assert shown(2**64) == "an int of about 20 digits"
    assert shown("abc") == "'abc'"
    assert shown("y" * 100) == repr("y" * 100)[:57] + "..."
