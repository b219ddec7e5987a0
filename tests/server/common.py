"""Sources and a question shared by the ServerGenerator tests."""

from __future__ import annotations

from typing import Any

from citeformer import Source

SOURCES: list[Any] = [
    Source("Paris is the capital of France.", title="France"),
    Source("Berlin is the capital of Germany."),
    "Madrid is the capital of Spain.",
]
QUESTION = "What are the capitals of France and Germany?"
NORMALIZED = [s if isinstance(s, Source) else Source(s) for s in SOURCES]


def collect(stream: Any) -> list[str]:
    return list(stream)


async def acollect(stream: Any) -> list[str]:
    return [chunk async for chunk in stream]
