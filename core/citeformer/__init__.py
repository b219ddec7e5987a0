"""citeformer: retrieval-augmented answers whose citation markers cannot name a missing source."""

from citeformer.citations import MarkerScan, parse_citations, scan_markers
from citeformer.errors import (
    CitationOutOfRangeError,
    CiteformerError,
    EmptyQuestionError,
    EmptySourceError,
    GrammarViolationError,
    InvalidInputError,
    ModelLoadError,
    NoSourcesError,
    PromptTooLongError,
    TokenizerMismatchError,
)
from citeformer.generator import AnswerStream, CiteGenerator
from citeformer.grammar import build_grammar
from citeformer.types import Citation, CitedAnswer, Policy, Source

__version__ = "0.1.0"

__all__ = [
    "AnswerStream",
    "CitationOutOfRangeError",
    "Citation",
    "CiteGenerator",
    "CitedAnswer",
    "CiteformerError",
    "EmptyQuestionError",
    "EmptySourceError",
    "GrammarViolationError",
    "InvalidInputError",
    "MarkerScan",
    "ModelLoadError",
    "NoSourcesError",
    "Policy",
    "PromptTooLongError",
    "Source",
    "TokenizerMismatchError",
    "build_grammar",
    "parse_citations",
    "scan_markers",
]
