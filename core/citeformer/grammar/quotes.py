"""Verbatim quotes located after the fact: every ``"quote" [k]`` of an answer, found in source k.

A served answer, or one re-checked after local generation, is verified here without building any
automaton: only the folded text of each cited source is searched.
"""

from __future__ import annotations

from collections.abc import Sequence

from citeformer.errors import GrammarViolationError
from citeformer.grammar.automata import QuotableText
from citeformer.grammar.markers import QUOTED_CITE
from citeformer.types import Quote, Source

__all__ = [
    "DEFAULT_MIN_QUOTE_CHARS",
    "DEFAULT_QUOTABLE_CHARS",
    "find_quotes",
    "trim_open_quote",
]

DEFAULT_MIN_QUOTE_CHARS = 1
DEFAULT_QUOTABLE_CHARS = 2000


def find_quotes(
    text: str, sources: Sequence[Source], *, quotable_chars: int = DEFAULT_QUOTABLE_CHARS
) -> tuple[Quote, ...]:
    """Every ``"quote" [k]`` of an answer, located in source k; raise if one is not verbatim.

    Every double quote of the text must belong to such a span: a quote with no marker, or one
    whose text source k does not contain, raises ``GrammarViolationError``.
    """
    quotes = []
    covered = 0
    # Only the folded text is needed here, not the automaton: a server's answer must not build
    # indexes (or fill their cache) just to be located.
    folded: dict[int, QuotableText] = {}
    for match in QUOTED_CITE.finditer(text):
        if '"' in text[covered:match.start()]:
            break
        covered = match.end()
        quoted, source_id = match.group(1), int(match.group(3))
        if not 1 <= source_id <= len(sources):
            raise GrammarViolationError(
                f"quote {quoted!r} cites [{source_id}], but only {len(sources)} source(s) exist"
            )
        if source_id not in folded:
            folded[source_id] = QuotableText.fold(sources[source_id - 1].text, quotable_chars)
        where = folded[source_id].locate(quoted)
        if where is None:
            raise GrammarViolationError(
                f"quote {quoted!r} does not occur in source {source_id}, which its marker names"
            )
        quotes.append(Quote(quoted, source_id, match.start(1), match.end(1), *where))
    if '"' in text[covered:]:
        raise GrammarViolationError(
            f"the answer has a double quote at offset {text.index(chr(34), covered)} that does "
            f"not open a cited quote: {text!r}"
        )
    return tuple(quotes)


def trim_open_quote(text: str) -> str:
    """Drop a quote the token budget cut off before its marker closed (``... "a turning``)."""
    matches = list(QUOTED_CITE.finditer(text))
    covered = matches[-1].end() if matches else 0
    dangling = text.find('"', covered)
    return text if dangling < 0 else text[:dangling].rstrip(" ")
