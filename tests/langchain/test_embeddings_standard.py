"""langchain-tests' standard suites for Embeddings, on MiniLMEmbeddings (the real model: it runs
offline in seconds)."""

from __future__ import annotations

import pytest
from langchain_tests.integration_tests import EmbeddingsIntegrationTests
from langchain_tests.unit_tests import EmbeddingsUnitTests

from citeformer_langchain import MiniLMEmbeddings


class TestMiniLMEmbeddingsUnit(EmbeddingsUnitTests):
    @property
    def embeddings_class(self) -> type[MiniLMEmbeddings]:
        return MiniLMEmbeddings


# The suite's async tests carry no marker of their own; pytest-asyncio (which langchain-tests
# brings) runs them with this one, which its sync tests do not need.
@pytest.mark.integration
@pytest.mark.asyncio
@pytest.mark.filterwarnings("ignore:The test <Function .* is marked with '@pytest.mark.asyncio'")
class TestMiniLMEmbeddingsIntegration(EmbeddingsIntegrationTests):
    @property
    def embeddings_class(self) -> type[MiniLMEmbeddings]:
        return MiniLMEmbeddings
