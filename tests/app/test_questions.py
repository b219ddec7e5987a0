"""Unit tests for citeformer.app.questions: reading a ``--questions`` file."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from citeformer.app.errors import InputError
from citeformer.app.questions import QuestionLine, read_questions


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_one_question_per_line_blank_lines_skipped(tmp_path: Path) -> None:
    path = write(tmp_path, "q.txt", "\ufeffWhen was it built?\n\n   \n  Who built it?  \r\nWhy?")
    assert read_questions(path) == [
        QuestionLine(1, "When was it built?"),
        QuestionLine(4, "Who built it?"),
        QuestionLine(5, "Why?"),
    ]


def test_json_lines_take_the_question_key(tmp_path: Path) -> None:
    path = write(tmp_path, "q.jsonl",
                 '{"question": "When?", "id": 7}\n\n{"question": " Who? "}\n')
    assert read_questions(path) == [QuestionLine(1, "When?"), QuestionLine(3, " Who? ")]


def test_bad_json_lines_are_kept_with_their_error(tmp_path: Path) -> None:
    path = write(tmp_path, "q.JSONL", "\n".join([
        '{"question": "Fine?"}',
        "When was it built?",
        '{"q": "wrong key"}',
        '["a list"]',
        '{"question": 42}',
        '{"question": "   "}',
    ]))
    items = read_questions(path)
    assert [(i.line, i.error is None) for i in items] == [
        (1, True), (2, False), (3, False), (4, False), (5, False), (6, False),
    ]
    assert items[1].error is not None and items[1].error.startswith("not JSON (Expecting value")
    assert all(i.error == 'no "question" string; write {"question": "..."}' for i in items[2:5])
    assert (items[5].question, items[5].error) == ("   ", "the question is empty")


def test_line_numbers_count_only_newlines(tmp_path: Path) -> None:
    path = write(tmp_path, "q.txt", "First\x0cstill first?\nSecond?\u2028still second")
    assert [i.line for i in read_questions(path)] == [1, 2]


def test_stdin(tmp_path: Path) -> None:
    assert read_questions("-", stdin=io.StringIO("A?\nB?\n")) == [
        QuestionLine(1, "A?"), QuestionLine(2, "B?"),
    ]


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda d: str(d / "missing.txt"), "does not exist"),
        (lambda d: str(d), "is a folder"),
        (lambda d: write(d, "blank.txt", "\n  \n"), "has no questions"),
        (lambda d: write(d, "blank.jsonl", "\n"), 'JSON lines: {"question": "..."}'),
    ],
)
def test_unusable_files_are_input_errors(tmp_path: Path, setup, message: str) -> None:
    with pytest.raises(InputError, match="the questions file") as error:
        read_questions(setup(tmp_path))
    assert message in str(error.value)
    assert error.value.exit_code == 2


def test_a_file_that_is_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "q.txt"
    path.write_bytes("Caf\xe9?".encode("latin-1"))
    with pytest.raises(InputError, match="is not UTF-8 text"):
        read_questions(str(path))
