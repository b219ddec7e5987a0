"""Turning (number of sources, policy, options) into GBNF text for xgrammar.

Every policy shares one cite-group rule. A cite-group is one to ``max_group`` markers
``[k]`` written back to back with strictly increasing k, each k in 1..N. Increasing order is how
the grammar forbids naming a source twice in a group without enumerating pairs: the rules are
chains (``after-3 ::= at-4 | after-4``), so the grammar grows linearly with N.

Square brackets appear nowhere else in any policy: the only ``[`` a model can write opens a marker,
so no marker of another shape (``[7]`` for N=3, ``[1, 2]``, ``[a]``) can appear in the output.
"""

from __future__ import annotations

from citeformer.types import Policy

DEFAULT_MAX_GROUP = 3
DEFAULT_MAX_SENTENCE_WORDS = 40
DEFAULT_MAX_WORD_CHARS = 32
DEFAULT_MAX_QUOTE_CHARS = 300

_OPTION_NAMES = ("max_group", "max_sentence_words", "max_word_chars", "max_quote_chars")


def build_grammar(
    n_sources: int,
    policy: Policy | str = Policy.REQUIRED,
    *,
    max_group: int = DEFAULT_MAX_GROUP,
    max_sentence_words: int = DEFAULT_MAX_SENTENCE_WORDS,
    max_word_chars: int = DEFAULT_MAX_WORD_CHARS,
    max_quote_chars: int = DEFAULT_MAX_QUOTE_CHARS,
) -> str:
    """Return the GBNF grammar (root rule ``root``) for answers citing ``n_sources`` sources.

    Options:
        max_group: most markers in one cite-group (``[1][2][3]`` is 3).
        max_sentence_words: REQUIRED only; words before a sentence must cite and end. It bounds
            a sentence at a word boundary, so a model that never chooses to cite is made to.
        max_word_chars: REQUIRED only; longest run of non-space characters in a word.
        max_quote_chars: QUOTES_ONLY only; longest quoted span before its closing quote.
    """
    policy = Policy.coerce(policy)
    _check_positive("n_sources", n_sources)
    _check_positive("max_group", max_group)
    _check_positive("max_sentence_words", max_sentence_words)
    _check_positive("max_word_chars", max_word_chars)
    _check_positive("max_quote_chars", max_quote_chars)

    if policy is Policy.REQUIRED:
        body = _required_body(max_sentence_words, max_word_chars)
    elif policy is Policy.QUOTES_ONLY:
        body = _quotes_only_body(max_quote_chars)
    else:
        body = _auto_body()
    return f"{body}\n{_cite_group_rules(n_sources, max_group)}"


def grammar_options(options: dict[str, object]) -> dict[str, int]:
    """Validate keyword options meant for ``build_grammar`` and return them as a dict."""
    unknown = sorted(set(options) - set(_OPTION_NAMES))
    if unknown:
        raise TypeError(
            f"unknown grammar option(s) {unknown}; valid options: {', '.join(_OPTION_NAMES)}"
        )
    for name, value in options.items():
        _check_positive(name, value)
    return dict(options)  # type: ignore[arg-type]


def _required_body(max_words: int, max_word_chars: int) -> str:
    # A word holds no space, bracket or sentence terminator, so a sentence can only end with a
    # cite-group followed by ".", "!" or "?". The word count bound lands on a word boundary.
    return f"""\
root ::= sentence (" " sentence)*
sentence ::= words " "? cite-group [.!?]
words ::= word (" " word){{0,{max_words - 1}}}
word ::= [^ \\t\\n\\r\\[\\].!?]{{1,{max_word_chars}}}"""


def _quotes_only_body(max_quote_chars: int) -> str:
    # Prose and quotes alternate so that every string has exactly one parse: prose runs up to the
    # next quote or marker, and a quote is always followed by its cite-group. As in AUTO, prose
    # between groups holds a letter or digit, and bare punctuation may only close the answer.
    return f"""\
root ::= quoted-cite+ (rest | end-punct)? | rest
rest ::= prose (link prose)* (link end-punct?)?
link ::= cite-group quoted-cite* | quoted-cite+
quoted-cite ::= "\\"" [^"\\[\\]]{{1,{max_quote_chars}}} "\\"" " "? cite-group
prose ::= [^"\\[\\]a-zA-Z0-9]* [a-zA-Z0-9] [^"\\[\\]]*
end-punct ::= [^"\\[\\]a-zA-Z0-9]{{1,8}}"""


def _auto_body() -> str:
    # Each cite-group follows prose that holds at least one letter or digit, so groups cannot
    # stack; only the last one may be followed by bare punctuation ("... France [1].").
    return """\
root ::= prose (cite-group prose)* (cite-group end-punct?)?
prose ::= [^\\[\\]a-zA-Z0-9]* [a-zA-Z0-9] [^\\[\\]]*
end-punct ::= [^\\[\\]a-zA-Z0-9]{1,8}"""


def _cite_group_rules(n: int, max_group: int) -> str:
    # at-L-k: the L-th marker of a group is [k]; it may be followed by a bigger id at level L+1.
    # from-L-k: the L-th marker is [j] for some j >= k (a chain, linear in n).
    depth = min(max_group, n)
    lines = ["cite-group ::= from-1-1"]
    for level in range(1, depth + 1):
        for k in range(1, n + 1):
            follow = f" from-{level + 1}-{k + 1}?" if level < depth and k < n else ""
            lines.append(f'at-{level}-{k} ::= "[{k}]"{follow}')
            alternatives = f"at-{level}-{k}" + (f" | from-{level}-{k + 1}" if k < n else "")
            lines.append(f"from-{level}-{k} ::= {alternatives}")
    return "\n".join(lines)


def _check_positive(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
