"""Fixtures shared by every test package: the embedded model and a real llama.cpp server."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from citeformer import CiteGenerator
from citeformer.types import CitedAnswer

if TYPE_CHECKING:
    from tests.server.llama_server import LlamaServer


@pytest.fixture(scope="session")
def default_generator() -> CiteGenerator:
    """The embedded SmolLM2-135M-Instruct, loaded once for the whole run."""
    return CiteGenerator.default(progress=False)


@pytest.fixture(scope="session")
def embedded_tokenizer() -> Any:
    """The embedded SmolLM2-135M-Instruct's tokenizer without its weights: from the model's cache
    where a run has built it (well under a second), else from the GGUF (about 4 s)."""
    from transformers import AutoTokenizer

    from citeformer.default_model import cache_folder, gguf_path

    gguf = gguf_path()
    cached = cache_folder(gguf)
    if (cached / "tokenizer.json").is_file():
        return AutoTokenizer.from_pretrained(cached)
    return AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)


_LLAMA_SERVERS: list[LlamaServer] = []
"""The session's llama.cpp server once started, watched by ``_llama_server_alive``."""


@pytest.fixture(scope="session")
def llama_server() -> Iterator[LlamaServer]:
    """One real llama.cpp server (llama-cpp-python's) on loopback for the whole run, stopped at
    the end; it serves the embedded model's GGUF. The log of a server that died is kept."""
    from tests.server.llama_server import start_llama_server

    server = start_llama_server()
    _LLAMA_SERVERS.append(server)
    try:
        yield server
    finally:
        _LLAMA_SERVERS.remove(server)
        died = server.exit_report() is not None
        server.stop()
        if not died:
            server.log.unlink(missing_ok=True)


@pytest.fixture(autouse=True)
def _llama_server_alive(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test that needs the session's llama.cpp server fails with the server's exit status and
    log tail once it is gone, not with "connection refused"; the test during which it died gets
    the same report at teardown."""
    if "llama_server" in request.fixturenames:
        for server in _LLAMA_SERVERS:
            if (report := server.exit_report()) is not None:
                pytest.fail(report, pytrace=False)
    alive = [server for server in _LLAMA_SERVERS if server.process.poll() is None]
    yield
    for server in alive:
        if (report := server.exit_report()) is not None:
            pytest.fail(f"during this test, {report}", pytrace=False)


# Every answer assembled in a test that runs a real model, server or notebook kernel has the
# evidence span of each citation checked where the answer is made: the span is the source's text
# at its offsets. Counted for the run's summary, so a suite that checked nothing shows it.
_SPANS_CHECKED = {"answers": 0, "citations": 0}


def check_evidence_offsets(answer: CitedAnswer) -> int:
    """Assert ``source.text[start:end] == span.text`` for every located citation; how many."""
    checked = 0
    for citation in answer.citations:
        span = citation.evidence
        if span is None:
            continue
        text = answer.source_for(citation).text
        assert text[span.source_start:span.source_end] == span.text, (
            f"evidence of [{citation.source_id}] in {answer.text!r} is {span!r}, but the source "
            f"holds {text[span.source_start:span.source_end]!r} at those offsets"
        )
        checked += 1
    return checked


@pytest.fixture(autouse=True)
def _evidence_round_trip(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if request.node.get_closest_marker("integration") is None:
        return
    made = CitedAnswer.__init__

    def checked_init(self: CitedAnswer, *args: Any, **kwargs: Any) -> None:
        made(self, *args, **kwargs)
        located = check_evidence_offsets(self)
        _SPANS_CHECKED["answers"] += bool(located)
        _SPANS_CHECKED["citations"] += located

    monkeypatch.setattr(CitedAnswer, "__init__", checked_init)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _SPANS_CHECKED["answers"]:
        terminalreporter.write_line(
            f"evidence offsets round-tripped: {_SPANS_CHECKED['citations']} citations in "
            f"{_SPANS_CHECKED['answers']} answers of integration tests"
        )
