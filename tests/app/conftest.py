"""Fixtures of the command-line tests: a folder of documents, a toy embedder, a cache of their
own."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "docs"


def toy_embed(texts: Sequence[str]) -> list[list[float]]:
    """A deterministic bag-of-letters embedder: no model needed."""
    return [[t.lower().count(c) for c in "abcdefghijklmnopqrstuvwxyz"] for t in texts]


@pytest.fixture(autouse=True)
def _cache_of_its_own(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each unit test keeps citeformer's cache (the index cache) in a folder of its own, never
    the user's. Integration tests keep the real one: their subprocesses load the embedded model
    from it."""
    if request.node.get_closest_marker("integration") is None:
        monkeypatch.setenv("CITEFORMER_CACHE", str(tmp_path_factory.mktemp("cache")))


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "paris.md").write_text(
        "# Paris\n\nParis is the capital of France.\n\nIt was founded long ago.\n",
        encoding="utf-8",
    )
    (folder / "berlin.txt").write_text("Berlin is the capital of Germany.", encoding="utf-8")
    return folder
