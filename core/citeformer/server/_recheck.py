"""Re-parsing a server's answer against the very grammar sent with the request.

A server that enforced the grammar can only have written text the grammar accepts: the whole of
it when the answer finished, a prefix when ``max_tokens`` cut it. ``GrammarCheck`` matches the
text with xgrammar as it arrives, without a model vocabulary, each piece once; a compiled grammar
is kept, by its text, for the next answers.
"""

from __future__ import annotations

import functools
from typing import Any

GRAMMAR_CACHE_SIZE = 32
"""Compiled grammars kept (least recently used dropped first); one is at most a few MB."""


@functools.cache
def _compiler() -> Any:
    # Heavy (xgrammar loads torch): imported when the first constrained answer is checked.
    import xgrammar as xgr

    # No vocabulary: the matcher reads characters, never tokens.
    return xgr.GrammarCompiler(xgr.TokenizerInfo([]), cache_enabled=False)


@functools.lru_cache(maxsize=GRAMMAR_CACHE_SIZE)
def compiled_grammar(grammar: str) -> Any:
    """The ``xgrammar.CompiledGrammar`` of a GBNF text, compiled once and cached."""
    return _compiler().compile_grammar(grammar)


def cached_grammars() -> int:
    """How many compiled grammars the cache holds."""
    return compiled_grammar.cache_info().currsize


class GrammarCheck:
    """Matches one answer against a grammar, piece by piece as it arrives."""

    def __init__(self, grammar: str) -> None:
        import xgrammar as xgr

        self._matcher = xgr.GrammarMatcher(
            compiled_grammar(grammar), terminate_without_stop_token=True
        )
        self.matched = 0
        """Characters accepted so far."""

    def feed(self, piece: str) -> int | None:
        """Match the next ``piece`` of the text.

        Returns:
            ``None`` if the grammar accepts it, else the offset in the whole text of the first
            character it refuses (the check ends there).
        """
        if self._matcher.accept_string(piece):
            self.matched += len(piece)
            return None
        # A refused string leaves the matcher as it was: find the character, one at a time.
        for index, char in enumerate(piece):
            if not self._matcher.accept_string(char):
                return self.matched + index
        self.matched += len(piece)
        return None

    def complete(self) -> bool:
        """Whether the text matched so far is a whole answer of the grammar."""
        return bool(self._matcher.is_terminated())
