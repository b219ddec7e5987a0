"""citeformer: retrieval-augmented answers whose citation markers cannot name a missing source.

Names are imported on first use, so that ``import citeformer`` (and the light modules such as
``citeformer.types``) do not load torch, transformers or xgrammar until generation needs them.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"


def _import_tqdm_auto_quietly() -> None:
    """In a Jupyter kernel, import ``tqdm.auto`` before transformers does, without its warning.

    transformers imports ``tqdm.auto`` when citeformer first loads it; in a kernel without
    ipywidgets that import warns "IProgress not found" (naming a file of the installation) and
    falls back to the console bar. The fallback is the same imported here first, with that one
    warning silenced; nothing is imported outside a kernel.
    """
    if "ipykernel" not in sys.modules or "tqdm.auto" in sys.modules:
        return
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="IProgress not found")
        importlib.import_module("tqdm.auto")


_import_tqdm_auto_quietly()

_EXPORTS = {
    "AnswerStream": "citeformer.generator",
    "CiteGenerator": "citeformer.generator",
    "AsyncServerAnswerStream": "citeformer.server",
    "ServerAnswerStream": "citeformer.server",
    "ServerGenerator": "citeformer.server",
    "GenerationOptions": "citeformer.request",
    "GenerationRequest": "citeformer.request",
    "build_request": "citeformer.request",
    "GrammarOptions": "citeformer.grammar.rules",
    "build_grammar": "citeformer.grammar.rules",
    "dotted_terms": "citeformer.grammar.rules",
    "MarkerScan": "citeformer.grammar.markers",
    "parse_citations": "citeformer.grammar.markers",
    "scan_markers": "citeformer.grammar.markers",
    "Citation": "citeformer.types",
    "CitedAnswer": "citeformer.types",
    "EvidenceSpan": "citeformer.types",
    "AnswerChunks": "citeformer.generation.protocols",
    "AnswerGenerator": "citeformer.generation.protocols",
    "AsyncAnswerChunks": "citeformer.generation.protocols",
    "AsyncAnswerGenerator": "citeformer.generation.protocols",
    "Policy": "citeformer.types",
    "Quote": "citeformer.types",
    "Refusal": "citeformer.evidence.refusal",
    "RefusalCheck": "citeformer.types",
    "Source": "citeformer.types",
    "CitationOutOfRangeError": "citeformer.errors",
    "CiteformerError": "citeformer.errors",
    "EmptyQuestionError": "citeformer.errors",
    "EmptySourceError": "citeformer.errors",
    "GrammarViolationError": "citeformer.errors",
    "InputTypeError": "citeformer.errors",
    "InvalidInputError": "citeformer.errors",
    "ModelLoadError": "citeformer.errors",
    "MissingDependencyError": "citeformer.errors",
    "NoSourcesError": "citeformer.errors",
    "PromptTooLongError": "citeformer.errors",
    "ServerConnectionError": "citeformer.errors",
    "ServerError": "citeformer.errors",
    "ServerIgnoredGrammarError": "citeformer.errors",
    "ServerResponseError": "citeformer.errors",
    "TokenizerMismatchError": "citeformer.errors",
}

__all__ = [
    "AnswerChunks",
    "AnswerGenerator",
    "AnswerStream",
    "AsyncAnswerChunks",
    "AsyncAnswerGenerator",
    "AsyncServerAnswerStream",
    "Citation",
    "CitationOutOfRangeError",
    "CiteGenerator",
    "CitedAnswer",
    "CiteformerError",
    "EmptyQuestionError",
    "EmptySourceError",
    "EvidenceSpan",
    "GenerationOptions",
    "GenerationRequest",
    "GrammarOptions",
    "GrammarViolationError",
    "InputTypeError",
    "InvalidInputError",
    "MarkerScan",
    "MissingDependencyError",
    "ModelLoadError",
    "NoSourcesError",
    "Policy",
    "PromptTooLongError",
    "Quote",
    "Refusal",
    "RefusalCheck",
    "ServerAnswerStream",
    "ServerConnectionError",
    "ServerError",
    "ServerGenerator",
    "ServerIgnoredGrammarError",
    "ServerResponseError",
    "Source",
    "TokenizerMismatchError",
    "build_grammar",
    "build_request",
    "dotted_terms",
    "parse_citations",
    "scan_markers",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'citeformer' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])


if TYPE_CHECKING:
    from citeformer.errors import (
        CitationOutOfRangeError,
        CiteformerError,
        EmptyQuestionError,
        EmptySourceError,
        GrammarViolationError,
        InputTypeError,
        InvalidInputError,
        MissingDependencyError,
        ModelLoadError,
        NoSourcesError,
        PromptTooLongError,
        ServerConnectionError,
        ServerError,
        ServerIgnoredGrammarError,
        ServerResponseError,
        TokenizerMismatchError,
    )
    from citeformer.evidence.refusal import Refusal
    from citeformer.generation.protocols import (
        AnswerChunks,
        AnswerGenerator,
        AsyncAnswerChunks,
        AsyncAnswerGenerator,
    )
    from citeformer.generator import AnswerStream, CiteGenerator
    from citeformer.grammar.markers import MarkerScan, parse_citations, scan_markers
    from citeformer.grammar.rules import GrammarOptions, build_grammar, dotted_terms
    from citeformer.request import GenerationOptions, GenerationRequest, build_request
    from citeformer.server import AsyncServerAnswerStream, ServerAnswerStream, ServerGenerator
    from citeformer.types import (
        Citation,
        CitedAnswer,
        EvidenceSpan,
        Policy,
        Quote,
        RefusalCheck,
        Source,
    )
