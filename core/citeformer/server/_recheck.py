"""Re-parsing a server's answer against the very grammar sent with the request.

A server that enforced the grammar can only have written text the grammar accepts: the whole of
it when the answer finished, a prefix when ``max_tokens`` cut it. ``GrammarCheck`` matches the
text with xgrammar as it arrives, without a model vocabulary, each piece once; a compiled grammar
is kept, by its text, for the next answers.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

GRAMMAR_CACHE_SIZE = 32
"""Compiled grammars kept (least recently used dropped first); one is at most a few MB."""

_cache: OrderedDict[str, Any] = OrderedDict()
_cache_lock = threading.Lock()
_compiler: Any = None


def compiled_grammar(grammar: str) -> Any:
    """The ``xgrammar.CompiledGrammar`` of a GBNF text, compiled once and cached."""
    global _compiler
    with _cache_lock:
        compiled = _cache.get(grammar)
        if compiled is not None:
            _cache.move_to_end(grammar)
            return compiled
    # Heavy (xgrammar loads torch): imported when the first constrained answer is checked.
    import xgrammar as xgr

    if _compiler is None:
        # No vocabulary: the matcher reads characters, never tokens.
        _compiler = xgr.GrammarCompiler(xgr.TokenizerInfo([]), cache_enabled=False)
    compiled = _compiler.compile_grammar(grammar)
    with _cache_lock:
        _cache[grammar] = compiled
        while len(_cache) > GRAMMAR_CACHE_SIZE:
            _cache.popitem(last=False)
    return compiled


def cached_grammars() -> int:
    """How many compiled grammars the cache holds."""
    with _cache_lock:
        return len(_cache)


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
