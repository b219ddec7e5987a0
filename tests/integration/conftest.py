"""Fixtures of the integration tests: a real llama.cpp server on loopback."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.llama_server import LlamaServer, start_llama_server


@pytest.fixture(scope="session")
def llama_server() -> Iterator[LlamaServer]:
    """One llama.cpp server for the whole run, stopped at the end."""
    server = start_llama_server()
    try:
        yield server
    finally:
        server.stop()
        server.log.unlink(missing_ok=True)
