"""Fixtures shared by unit and integration tests."""

from __future__ import annotations

import pytest

from citeformer import CiteGenerator


@pytest.fixture(scope="session")
def default_generator() -> CiteGenerator:
    """The embedded SmolLM2-135M-Instruct, loaded once for the whole run."""
    return CiteGenerator.default(progress=False)
