"""The scripted OpenAI-compatible server, now ``citeformer.testing.FakeServer``."""

from citeformer.testing._server import MODEL, FakeServer, byte_chunks, chat_chunks, sse  # noqa: F401
