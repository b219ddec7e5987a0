"""LlamaIndex integration: a response synthesizer whose citations cannot be fabricated."""

from citeformer_llamaindex.embeddings import MiniLMEmbedding
from citeformer_llamaindex.llm import CiteformerLLM
from citeformer_llamaindex.splitting import PARENT_END_KEY, PARENT_START_KEY, CitationChunker
from citeformer_llamaindex.synthesizer import INSTRUCTIONS_PROMPT_KEY, CitationSynthesizer

__all__ = [
    "INSTRUCTIONS_PROMPT_KEY",
    "PARENT_END_KEY",
    "PARENT_START_KEY",
    "CitationChunker",
    "CitationSynthesizer",
    "CiteformerLLM",
    "MiniLMEmbedding",
]
