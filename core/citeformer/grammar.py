"""Turning (number of sources, policy, options) into GBNF text for xgrammar.

Every policy shares one cite-group rule. A cite-group is one to ``max_group`` markers
``[k]`` written back to back with strictly increasing k, each k in 1..N. Increasing order is how
the grammar forbids naming a source twice in a group without enumerating pairs or triples.

Square brackets appear nowhere else in any policy: the only ``[`` a model can write opens a marker,
so no marker of another shape (``[7]`` for N=3, ``[1, 2]``, ``[a]``) can appear in the output.
"""

from __future__ import annotations

from collections.abc import Mapping

from citeformer.types import Policy

DEFAULT_MAX_GROUP = 3
DEFAULT_MAX_SENTENCE_WORDS = 24
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


def grammar_options(options: Mapping[str, object]) -> dict[str, int]:
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
    # A marker's digits are spelled through a trie shared by every group that reaches it:
    # digits-L-W-P is "the rest of a W-digit id starting with P, as the L-th marker of a group".
    # above-L-K lists the ids greater than K as a few trie entries (one per digit position and
    # length), so the grammar grows as O(n * digits) with shallow rules; a chain of n rules
    # ("from-k ::= at-k | from-(k+1)") is equivalent but compiles 20x slower at n=1000.
    depth = min(max_group, n)
    width = len(str(n))
    pending: list[tuple[int, int, str]] = []
    named: set[tuple[int, int, str]] = set()

    def fits(prefix: str, length: int) -> bool:
        return int(prefix.ljust(length, "0")) <= n

    def rest(level: int, marker: str) -> str:
        # After the L-th marker [k], another may follow if it is bigger and the group not full.
        if level == depth or int(marker) == n:
            return ""
        return f' ("[" above-{level + 1}-{marker})?'

    def entry(level: int, length: int, prefix: str, spelled: str) -> str:
        # `spelled` is what this alternative writes of `prefix` (all of it, or its last digit).
        if len(prefix) == length:
            return f'"{spelled}]"{rest(level, prefix)}'
        if (level, length, prefix) not in named:
            named.add((level, length, prefix))
            pending.append((level, length, prefix))
        return f'"{spelled}" digits-{level}-{length}-{prefix}'

    def above(level: int, k: int) -> str:
        digits = str(k) if k else ""
        entries = []
        for length in range(max(len(digits), 1), width + 1):
            if length > len(digits):
                prefixes = [str(c) for c in range(1, 10)]
            else:
                prefixes = [
                    digits[:i] + str(c)
                    for i in range(length)
                    for c in range(int(digits[i]) + 1, 10)
                ]
            entries += [entry(level, length, p, p) for p in prefixes if fits(p, length)]
        return " | ".join(entries)

    lines = [f'cite-group ::= "[" ({above(1, 0)})']
    lines += [f"above-{level}-{k} ::= {above(level, k)}" for level in range(2, depth + 1)
              for k in range(level - 1, n)]
    while pending:
        level, length, prefix = pending.pop()
        children = [
            entry(level, length, prefix + str(c), str(c))
            for c in range(10) if fits(prefix + str(c), length)
        ]
        lines.append(f"digits-{level}-{length}-{prefix} ::= {' | '.join(children)}")
    return "\n".join(lines)


def _check_positive(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
