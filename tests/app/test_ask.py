"""Unit tests for citeformer.app.ask: the ``ask`` command called without its argument parser."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from citeformer import AnswerGenerator, Policy
from citeformer.app import AskOptions, Services, ask
from citeformer.testing import FakeGenerator
from tests.app.conftest import toy_embed


def services_of(generator: FakeGenerator, warnings: list[str] | None = None) -> Services:
    def load(model: str | None, *, progress: bool, **_: object) -> AnswerGenerator:
        return generator

    return Services(load_model=load, embed=toy_embed,
                    warn=(warnings.append if warnings is not None else print))


def test_ask_returns_the_answer_it_prints(docs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    generator = FakeGenerator("Paris is the capital of France [1].")
    out = io.StringIO()
    options = AskOptions("Capital of France?", (str(docs),), policy="auto", top_k=2, quiet=True)
    answer = ask(options, services_of(generator), out)
    assert out.getvalue().startswith("Paris is the capital of France [1].\n\nReferences:\n[1] ")
    assert answer.cited_ids == [1]
    (request,) = generator.requests
    assert (request.policy, request.n_sources, request.max_new_tokens) == (Policy.AUTO, 2, 160)
    assert capsys.readouterr().err == ""  # quiet


def test_json_output_is_one_object(docs: Path) -> None:
    out = io.StringIO()
    options = AskOptions("Capital?", (str(docs),), output="json", quiet=True)
    answer = ask(options, services_of(FakeGenerator("It is Paris [2].")), out)
    data = json.loads(out.getvalue())
    assert data["text"] == answer.text and data["question"] == "Capital?"
    assert [s["cited"] for s in data["sources"]] == [False, True]  # two documents, one passage each


def test_skipped_files_go_to_the_warning_sink(docs: Path) -> None:
    (docs / "broken.md").write_bytes(b"\xff\xfe\x00")
    warnings: list[str] = []
    options = AskOptions("Capital?", (str(docs),), quiet=True)
    ask(options, services_of(FakeGenerator(), warnings), io.StringIO())
    (warning,) = warnings
    assert warning.startswith("skipping ") and "broken.md" in warning
