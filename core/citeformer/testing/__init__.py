"""Fakes for testing code built on citeformer, offline and without a model.

``FakeGenerator`` answers from a script, sync and async, with answers checked as real ones are;
``FakeServer`` is an OpenAI-compatible serving engine on ``httpx.MockTransport`` for
``ServerGenerator(..., transport=FakeServer(...))``.
"""

from citeformer.testing._generator import (
    AsyncFakeStream,
    FakeGenerator,
    FakeStream,
    SyncFakeGenerator,
)
from citeformer.testing._server import MODEL, FakeServer, byte_chunks, chat_chunks, sse

__all__ = [
    "MODEL",
    "AsyncFakeStream",
    "FakeGenerator",
    "FakeServer",
    "FakeStream",
    "SyncFakeGenerator",
    "byte_chunks",
    "chat_chunks",
    "sse",
]
