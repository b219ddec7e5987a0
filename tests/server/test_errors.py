"""What a server said instead of answering, worded (server/_errors.py)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from citeformer import ServerResponseError
from citeformer.server._errors import error_message, first_model, json_of, redact


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("http://u:p@h/v1", "http://u:***@h/v1"),
        ("see https://user:pa:ss@host:1/x then", "see https://user:***@host:1/x then"),
        ("http://h/v1", "http://h/v1"),
        ("http://user@h/v1", "http://user@h/v1"),
    ],
)
def test_redact(text: str, shown: str) -> None:
    assert redact(text) == shown


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"error": {"message": "bad grammar", "type": "x"}}, "bad grammar"),
        ({"detail": [{"msg": "field required"}]}, '[{"msg": "field required"}]'),
        ({"error": "overloaded"}, "overloaded"),
        ({"message": "nope"}, "nope"),
        ([1, 2], "[1, 2]"),
    ],
)
def test_error_message(data: Any, message: str) -> None:
    assert error_message(data) == message


@pytest.mark.parametrize(
    "body", [b"", b"<html>", b'{"data": []}', b'{"data": [{"id": 7}]}', b'{"data": {"id": "m"}}']
)
def test_a_models_list_without_a_model_is_an_error(body: bytes) -> None:
    with pytest.raises(ServerResponseError, match="lists no model|not JSON"):
        first_model(body, "http://h/v1")
    assert first_model(b'{"data": [{"id": "m1"}, {"id": "m2"}]}', "http://h/v1") == "m1"


def test_json_of_names_the_server() -> None:
    with pytest.raises(ServerResponseError, match="http://h/v1 answered with something that is"):
        json_of(b"\xff\xfe", "http://h/v1")
    assert json_of(httpx.Response(200, json={"a": 1}).content, "http://h/v1") == {"a": 1}
