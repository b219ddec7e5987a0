"""Fixtures of the ServerGenerator tests."""

from __future__ import annotations

import pytest

from citeformer.server import _transport
from tests.server.vllm_fixture import vllm_server  # noqa: F401 - the real vLLM server fixture


@pytest.fixture(autouse=True)
def no_env_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """No API key from the environment of whoever runs the tests."""
    monkeypatch.delenv("CITEFORMER_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The backoff waits, recorded instead of slept (sync and async)."""
    waited: list[float] = []

    async def asleep(seconds: float) -> None:
        waited.append(seconds)

    monkeypatch.setattr(_transport.time, "sleep", waited.append)
    monkeypatch.setattr(_transport.asyncio, "sleep", asleep)
    return waited
