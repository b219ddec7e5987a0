"""The citation grammar: what an answer may be, as GBNF, and how markers and quotes are read back.

The modules:

```text
rules         (number of sources, policy, options) -> GBNF text; GrammarOptions, dotted terms
quote_rules   the verbatim quotes of each source as GBNF rules (for serving engines)
automata      the substring automata those quotes are made of
markers       every pattern that reads a marker; scan_markers, parse_citations
quotes        an answer's quotes located in their sources after the fact
```
"""

from citeformer.grammar.markers import MarkerScan, parse_citations, scan_markers, strip_markers
from citeformer.grammar.quotes import find_quotes
from citeformer.grammar.rules import (
    DEFAULT_MAX_GROUP,
    DEFAULT_MAX_QUOTE_CHARS,
    DEFAULT_MAX_SENTENCE_WORDS,
    DEFAULT_MAX_WORD_CHARS,
    MAX_MARKER_SLOTS,
    MAX_TERM_CHARS,
    MAX_TERMS,
    OPTION_LIMITS,
    GrammarOptions,
    build_grammar,
    check_terms,
    dotted_terms,
    marker_grammar,
    render_grammar,
)

__all__ = [
    "DEFAULT_MAX_GROUP",
    "DEFAULT_MAX_QUOTE_CHARS",
    "DEFAULT_MAX_SENTENCE_WORDS",
    "DEFAULT_MAX_WORD_CHARS",
    "MAX_MARKER_SLOTS",
    "MAX_TERMS",
    "MAX_TERM_CHARS",
    "OPTION_LIMITS",
    "GrammarOptions",
    "MarkerScan",
    "build_grammar",
    "check_terms",
    "dotted_terms",
    "find_quotes",
    "marker_grammar",
    "parse_citations",
    "render_grammar",
    "scan_markers",
    "strip_markers",
]
