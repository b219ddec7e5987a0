"""Turning (number of sources, policy, options) into GBNF text for xgrammar.

Every policy shares one cite-group rule. A cite-group is one to ``max_group`` markers
``[k]`` written back to back with strictly increasing k, each k in 1..N. Increasing order is how
the grammar forbids naming a source twice in a group without enumerating pairs or triples.

Square brackets appear nowhere else in any policy: the only ``[`` a model can write opens a marker,
so no marker of another shape (``[7]`` for N=3, ``[1, 2]``, ``[a]``) can appear in the output.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from citeformer.quotes import DEFAULT_MIN_QUOTE_CHARS, DEFAULT_QUOTABLE_CHARS, quote_rules
from citeformer.types import Policy, Source

DEFAULT_MAX_GROUP = 3
DEFAULT_MAX_SENTENCE_WORDS = 24
DEFAULT_MAX_WORD_CHARS = 32
DEFAULT_MAX_QUOTE_CHARS = 300

_OPTION_NAMES = (
    "max_group", "max_sentence_words", "max_word_chars", "max_quote_chars",
    "min_quote_chars", "quotable_chars", "verbatim_quotes",
)


def build_grammar(
    n_sources: int,
    policy: Policy | str = Policy.REQUIRED,
    *,
    max_group: int = DEFAULT_MAX_GROUP,
    max_sentence_words: int = DEFAULT_MAX_SENTENCE_WORDS,
    max_word_chars: int = DEFAULT_MAX_WORD_CHARS,
    max_quote_chars: int = DEFAULT_MAX_QUOTE_CHARS,
    quote_sources: Sequence[Source | str] | None = None,
    verbatim_quotes: bool = True,
    min_quote_chars: int = DEFAULT_MIN_QUOTE_CHARS,
    quotable_chars: int = DEFAULT_QUOTABLE_CHARS,
) -> str:
    """Return the GBNF grammar (root rule ``root``) for answers citing ``n_sources`` sources.

    Options:
        max_group: most markers in one cite-group (``[1][2][3]`` is 3).
        max_sentence_words: REQUIRED only; words before a sentence must cite and end. It bounds
            a sentence at a word boundary, so a model that never chooses to cite is made to.
        max_word_chars: REQUIRED only; longest run of non-space characters in a word.
        max_quote_chars: QUOTES_ONLY only; longest quoted span before its closing quote.
        quote_sources: QUOTES_ONLY only; the sources' texts. With ``verbatim_quotes`` (default)
            a quote can then only be ``"text" [k]`` with ``text`` a substring of source k, written
            out as rules (for engines that take a grammar as text; local generation enforces the
            same automaton with ``citeformer.quotes.QuoteGuard`` instead, which builds faster).
            Without them, quotes are bounded in shape only.
        verbatim_quotes: QUOTES_ONLY only; ``False`` lets quotes hold any text.
        min_quote_chars: verbatim quotes only; shortest quote.
        quotable_chars: verbatim quotes only; how much of each source (white space folded) a
            quote may come from.
    """
    policy = Policy.coerce(policy)
    _check_positive("n_sources", n_sources)
    grammar_options({
        "max_group": max_group, "max_sentence_words": max_sentence_words,
        "max_word_chars": max_word_chars, "max_quote_chars": max_quote_chars,
        "verbatim_quotes": verbatim_quotes, "min_quote_chars": min_quote_chars,
        "quotable_chars": quotable_chars,
    })

    if policy is Policy.REQUIRED:
        body = _required_body(max_sentence_words, max_word_chars)
    elif policy is Policy.QUOTES_ONLY and verbatim_quotes and quote_sources is not None:
        if len(quote_sources) != n_sources:
            raise ValueError(
                f"quote_sources holds {len(quote_sources)} texts but n_sources is {n_sources}; "
                "pass the texts of exactly the sources the markers number"
            )
        sources = [Source(s) if isinstance(s, str) else s for s in quote_sources]
        ids, rules = quote_rules(
            sources, min_quote_chars=min_quote_chars, quotable_chars=quotable_chars
        )
        body = _verbatim_quotes_body(ids, rules)
    elif policy is Policy.QUOTES_ONLY:
        body = _quotes_only_body(max_quote_chars)
    else:
        body = _auto_body()
    return f"{body}\n{_cite_group_rules(n_sources, max_group)}"


def grammar_options(options: Mapping[str, object]) -> dict[str, int | bool]:
    """Validate keyword options meant for ``build_grammar`` and return them as a dict."""
    unknown = sorted(set(options) - set(_OPTION_NAMES))
    if unknown:
        raise TypeError(
            f"unknown grammar option(s) {unknown}; valid options: {', '.join(_OPTION_NAMES)}"
        )
    for name, value in options.items():
        if name == "verbatim_quotes":
            if not isinstance(value, bool):
                raise ValueError(f"verbatim_quotes must be True or False, got {value!r}")
        else:
            _check_positive(name, value)
    shortest = options.get("min_quote_chars", DEFAULT_MIN_QUOTE_CHARS)
    longest = options.get("max_quote_chars", DEFAULT_MAX_QUOTE_CHARS)
    if shortest > longest:  # type: ignore[operator]
        raise ValueError(
            f"min_quote_chars ({shortest}) is larger than max_quote_chars ({longest}), so no "
            "quote could be written; lower min_quote_chars or raise max_quote_chars"
        )
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


def _verbatim_quotes_body(ids: list[int], rules: list[str]) -> str:
    # As _quotes_only_body, but a quote is one of the quote-k rules and is cited by [k] alone.
    if not ids:  # no source has a quotable span: the answer is prose and markers only
        return _auto_body(excluded='"')
    alternatives = " | ".join(f'quote-{k} "\\"" " "? "[{k}]"' for k in ids)
    return "\n".join([
        "root ::= quoted-cite+ (rest | end-punct)? | rest",
        "rest ::= prose (link prose)* (link end-punct?)?",
        "link ::= cite-group quoted-cite* | quoted-cite+",
        f'quoted-cite ::= "\\"" ({alternatives})',
        'prose ::= [^"\\[\\]a-zA-Z0-9]* [a-zA-Z0-9] [^"\\[\\]]*',
        'end-punct ::= [^"\\[\\]a-zA-Z0-9]{1,8}',
        *rules,
    ])


def _auto_body(excluded: str = "") -> str:
    # Each cite-group follows prose that holds at least one letter or digit, so groups cannot
    # stack; only the last one may be followed by bare punctuation ("... France [1].").
    # `excluded`: characters prose may not hold besides brackets ('"' when nothing is quotable).
    return f"""\
root ::= prose (cite-group prose)* (cite-group end-punct?)?
prose ::= [^{excluded}\\[\\]a-zA-Z0-9]* [a-zA-Z0-9] [^{excluded}\\[\\]]*
end-punct ::= [^{excluded}\\[\\]a-zA-Z0-9]{{1,8}}"""


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
