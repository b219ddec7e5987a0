"""Fixtures shared by every test package: the embedded model and a real llama.cpp server."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from citeformer import CiteGenerator

if TYPE_CHECKING:
    from tests.server.llama_server import LlamaServer


@pytest.fixture(scope="session")
def default_generator() -> CiteGenerator:
    """The embedded SmolLM2-135M-Instruct, loaded once for the whole run."""
    return CiteGenerator.default(progress=False)


@pytest.fixture(scope="session")
def llama_server() -> Iterator[LlamaServer]:
    """One real llama.cpp server (llama-cpp-python's) on loopback for the whole run, stopped at
    the end; it serves the embedded model's GGUF."""
    from tests.server.llama_server import start_llama_server

    server = start_llama_server()
    try:
        yield server
    finally:
        server.stop()
        server.log.unlink(missing_ok=True)
