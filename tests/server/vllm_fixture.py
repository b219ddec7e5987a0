"""The session fixture ``vllm_server``: one real vLLM server for the whole run, its venv built once
and cached (see ``tests/server/vllm_server.py``). ``conftest.py`` imports it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.server.vllm_server import VllmServer, start_vllm_server


@pytest.fixture(scope="session")
def vllm_server() -> Iterator[VllmServer]:
    """A vLLM server on loopback serving the embedded model, stopped (process group) at the end.

    A test may kill it; ``ensure_running()`` starts it again on the same port.
    """
    server = start_vllm_server()
    try:
        yield server
    finally:
        server.stop()
        server.log.unlink(missing_ok=True)
