"""Turning (number of sources, policy, options) into GBNF text for xgrammar.

Every policy shares one cite-group rule. A cite-group is one to ``max_group`` markers
``[k]`` written back to back with strictly increasing k, each k in 1..N. Increasing order is how
the grammar forbids naming a source twice in a group without enumerating pairs or triples.

Square brackets appear nowhere else in any policy: the only ``[`` a model can write opens a marker,
so no marker of another shape (``[7]`` for N=3, ``[1, 2]``, ``[a]``) can appear in the output.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields

from citeformer.errors import InputTypeError, InvalidInputError, check_positive_int, shown
from citeformer.grammar.quote_rules import quote_rules
from citeformer.grammar.quotes import DEFAULT_MIN_QUOTE_CHARS, DEFAULT_QUOTABLE_CHARS
from citeformer.types import Policy, Source

__all__ = [
    "DEFAULT_MAX_GROUP",
    "DEFAULT_MAX_QUOTE_CHARS",
    "DEFAULT_MAX_SENTENCE_WORDS",
    "DEFAULT_MAX_TERMS",
    "DEFAULT_MAX_WORD_CHARS",
    "MAX_MARKER_SLOTS",
    "MAX_TERMS",
    "MAX_TERM_CHARS",
    "OPTION_LIMITS",
    "TERM_EDGE_CHARS",
    "GrammarOptions",
    "build_grammar",
    "check_marker_slots",
    "check_terms",
    "dotted_terms",
    "marker_grammar",
    "render_grammar",
]

DEFAULT_MAX_GROUP = 3
DEFAULT_MAX_SENTENCE_WORDS = 24
DEFAULT_MAX_WORD_CHARS = 32
DEFAULT_MAX_QUOTE_CHARS = 300
DEFAULT_MAX_TERMS = 64
"""Most dotted terms (``dotted_terms``) one grammar spells out."""
TERM_EDGE_CHARS = 8
"""Characters a word may hold before and after a dotted term: ``(3.8)``, ``v3.8``, ``3.8,``."""

# The bounds below keep the compile of a grammar's markers, words and terms to a few seconds and
# tens of MB: at most 3.7 s and 36 MB at their corners on Llama 3's 128k-token vocabulary, two CPU
# cores (``benchmarks/grammar_bounds.py``). Past them it grows fast: max_word_chars=10000 with 64
# long terms compiled for 126 s in 1.6 GB, 10,000 sources for 547 s in 6.8 GB. (Verbatim quotes
# spelled out for a server grow with the sources' text instead, as the prompt does.)
OPTION_LIMITS: Mapping[str, int] = {
    "max_group": 10,
    "max_sentence_words": 1000,
    "max_word_chars": 128,
    "max_quote_chars": 10_000,
    "min_quote_chars": 10_000,
    "quotable_chars": 100_000,
}
"""The largest value of each integer grammar option."""
MAX_TERMS = 256
"""Most dotted terms one grammar spells out (``terms=``, ``dotted_terms(max_terms=...)``)."""
MAX_TERM_CHARS = OPTION_LIMITS["max_word_chars"]
"""Longest dotted term a grammar spells out."""
MAX_MARKER_SLOTS = 3000
"""Most ``n_sources * min(max_group, n_sources)``: the cite-group rules grow with it (0.7 MB of
grammar at 3,000; 1,000 sources with max_group=10 are 3.2 MB and compile for 29 s)."""

# A dotted term: word characters and hyphens in two or more parts joined by single dots.
_DOTTED = re.compile(r"[\w-]+(?:\.[\w-]+)+")

@dataclass(frozen=True)
class GrammarOptions:
    """The options that shape a citation grammar, checked; every field has its default.

    Each int option is from 1 to its ``OPTION_LIMITS`` value (``max_group`` 10,
    ``max_sentence_words`` 1000, ``max_word_chars`` 128, ``max_quote_chars`` and
    ``min_quote_chars`` 10,000, ``quotable_chars`` 100,000).
    """

    max_group: int = DEFAULT_MAX_GROUP
    """Most markers in one cite-group (``[1][2][3]`` is 3)."""

    max_sentence_words: int = DEFAULT_MAX_SENTENCE_WORDS
    """REQUIRED only: words before a sentence must cite and end. It bounds a sentence at a word
    boundary, so a model that never chooses to cite is made to."""

    max_word_chars: int = DEFAULT_MAX_WORD_CHARS
    """REQUIRED only: longest run of non-space characters in a word."""

    max_quote_chars: int = DEFAULT_MAX_QUOTE_CHARS
    """QUOTES_ONLY only: longest quoted span before its closing quote."""

    min_quote_chars: int = DEFAULT_MIN_QUOTE_CHARS
    """Verbatim quotes only: shortest quote."""

    quotable_chars: int = DEFAULT_QUOTABLE_CHARS
    """Verbatim quotes only: how much of each source (white space folded) a quote may use."""

    verbatim_quotes: bool = True
    """QUOTES_ONLY only: ``False`` lets quotes hold any text."""

    sentence_ends: str = ".!?"
    """REQUIRED only: the characters that may end a sentence after its cite-group."""

    source_terms: bool = True
    """REQUIRED only: a word may hold a ``.`` only inside a dotted term that the question or a
    source holds (a version, a decimal, a dotted name: ``3.8``, ``0.34``, ``str.join``), copied
    whole, so an answer can state ``Python 3.8`` yet never invent a decimal where the model meant
    to end a sentence. ``False``: no ``.`` inside a word, the grammar then depends on N alone."""

    def __post_init__(self) -> None:
        for spec in fields(self):
            value = getattr(self, spec.name)
            if spec.name in ("verbatim_quotes", "source_terms"):
                if not isinstance(value, bool):
                    raise InputTypeError(f"{spec.name} must be True or False, got {shown(value)}")
            elif spec.name == "sentence_ends":
                if not isinstance(value, str) or not value or set(value) - set(".!?"):
                    raise InvalidInputError(
                        f"sentence_ends must be a non-empty string of '.', '!' and '?', got "
                        f"{shown(value)}"
                    )
            else:
                check_positive_int(spec.name, value)
                limit = OPTION_LIMITS[spec.name]
                if value > limit:
                    raise InvalidInputError(
                        f"{spec.name} must be at most {limit}, got {shown(value)}: a larger one "
                        f"makes the grammar too costly to compile; pass {spec.name}={limit} or less"
                    )
        if self.min_quote_chars > self.max_quote_chars:
            raise InvalidInputError(
                f"min_quote_chars ({self.min_quote_chars}) is larger than max_quote_chars "
                f"({self.max_quote_chars}), so no quote could be written; lower min_quote_chars "
                "or raise max_quote_chars"
            )

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The option names, as keyword arguments of ``build_grammar`` and ``generate``."""
        return tuple(spec.name for spec in fields(cls))

    @classmethod
    def of(cls, options: Mapping[str, object]) -> GrammarOptions:
        """Options from keyword arguments; an unknown name raises, naming the valid ones."""
        unknown = sorted(set(options) - set(cls.names()))
        if unknown:
            raise InputTypeError(
                f"unknown grammar option(s) {unknown}; valid options: {', '.join(cls.names())}"
            )
        return cls(**options)  # type: ignore[arg-type]

    def as_dict(self) -> dict[str, int | bool | str]:
        """The options as keyword arguments."""
        return {spec.name: getattr(self, spec.name) for spec in fields(self)}


def build_grammar(
    n_sources: int,
    policy: Policy | str = Policy.REQUIRED,
    *,
    quote_sources: Sequence[Source | str] | None = None,
    terms: Sequence[str] = (),
    **options: int | bool | str,
) -> str:
    """Return the GBNF grammar (root rule ``root``) for answers citing ``n_sources`` sources.

    ``options`` are the fields of ``GrammarOptions`` (``max_group``, ``max_sentence_words``,
    ``max_word_chars``, ``max_quote_chars``, ``min_quote_chars``, ``quotable_chars``,
    ``verbatim_quotes``, ``sentence_ends``, ``source_terms``). ``terms``: REQUIRED only, the
    dotted terms a word may copy, as ``dotted_terms`` finds them in the question and sources
    (``GenerationRequest.grammar_text`` passes them); ignored when ``source_terms`` is ``False``.
    ``quote_sources``: QUOTES_ONLY only, the sources' texts. With
    ``verbatim_quotes`` (default) a quote can then only be ``"text" [k]`` with ``text`` a
    substring of source k, written out as rules (for engines that take a grammar as text; local
    generation enforces the same automaton with ``citeformer.decoding.quote_guard.QuoteGuard``,
    which builds faster). Without them, quotes are bounded in shape only.
    """
    sources = None
    if quote_sources is not None:
        sources = tuple(Source(s) if isinstance(s, str) else s for s in quote_sources)
    return render_grammar(
        n_sources, Policy.coerce(policy), GrammarOptions.of(options), sources, check_terms(terms)
    )


def check_terms(terms: Sequence[str]) -> tuple[str, ...]:
    """``terms`` as a tuple, each checked to be a dotted term a grammar can spell.

    At most ``MAX_TERMS`` of them, each at most ``MAX_TERM_CHARS`` long.
    """
    if isinstance(terms, str) or not all(isinstance(term, str) for term in terms):
        raise InputTypeError(f"terms must be a sequence of strings, got {terms!r}")
    if len(terms) > MAX_TERMS:
        raise InvalidInputError(
            f"terms holds {len(terms)} terms, more than the {MAX_TERMS} a grammar spells out; "
            f"pass the first {MAX_TERMS} (dotted_terms() returns at most {MAX_TERMS})"
        )
    for term in terms:
        if len(term) > MAX_TERM_CHARS:
            raise InvalidInputError(
                f"term {term[:40]!r}... is {len(term)} characters long, more than the "
                f"{MAX_TERM_CHARS} a grammar spells out; leave it out"
            )
        if not _DOTTED.fullmatch(term):
            raise InvalidInputError(
                f"term {term!r} is not a dotted term (word characters or hyphens joined by "
                "single dots, such as '3.8' or 'str.join'); take terms from dotted_terms()"
            )
    return tuple(terms)


def check_marker_slots(n_sources: int, max_group: int) -> None:
    """Raise unless ``n_sources`` and ``max_group`` keep within ``MAX_MARKER_SLOTS``."""
    slots = n_sources * min(max_group, n_sources)
    if slots > MAX_MARKER_SLOTS:
        fewest = MAX_MARKER_SLOTS // min(max_group, n_sources)
        raise InvalidInputError(
            f"{n_sources} sources with max_group={max_group} make a grammar too costly to "
            f"compile (n_sources * max_group is {slots}, at most {MAX_MARKER_SLOTS}); pass at "
            f"most {fewest} sources, or a smaller max_group"
        )


def dotted_terms(
    texts: Iterable[str], *, max_chars: int = DEFAULT_MAX_WORD_CHARS,
    max_terms: int = DEFAULT_MAX_TERMS,
) -> tuple[str, ...]:
    """The dotted terms of ``texts`` that a ``REQUIRED`` answer may copy into a word.

    A dotted term is two or more runs of word characters or hyphens joined by single dots:
    ``3.8``, ``0.34``, ``str.join``, ``collections.abc.Sequence``, ``e.g``; each one's dotted
    prefixes count too (``collections.abc``). In order of first occurrence, each once, at most
    ``max_chars`` characters long, the first ``max_terms`` of them (at most ``MAX_TERMS``).
    """
    check_positive_int("max_terms", max_terms)
    if max_terms > MAX_TERMS:
        raise InvalidInputError(
            f"max_terms must be at most {MAX_TERMS}, got {max_terms}; a grammar spells out at "
            f"most {MAX_TERMS} terms"
        )
    longest = min(max_chars, MAX_TERM_CHARS)
    found: dict[str, None] = {}
    for text in texts:
        for match in _DOTTED.finditer(text):
            parts = match.group(0).split(".")
            for end in range(2, len(parts) + 1):
                term = ".".join(parts[:end])
                if len(term) <= longest:
                    found.setdefault(term, None)
                    if len(found) == max_terms:
                        return tuple(found)
    return tuple(found)


def render_grammar(
    n_sources: int,
    policy: Policy,
    options: GrammarOptions,
    quote_sources: Sequence[Source] | None = None,
    terms: Sequence[str] = (),
    *,
    bound_words: bool = True,
    count_words: bool = True,
    refusal: str | None = None,
) -> str:
    """``build_grammar`` for arguments already checked (a ``GenerationRequest``'s).

    ``bound_words=False``: ``REQUIRED`` words of any length, for a matcher whose bitmask
    ``citeformer.decoding.word_bound.WordBound`` bounds (much faster to fill);
    ``count_words=False``: ``REQUIRED`` sentences of any number of words, which ``WordBound``
    counts (with ``bound_words=False`` too; faster again on large vocabularies). ``refusal``: a
    sentence the grammar also allows as the whole answer (``with_refusal``; ``REQUIRED`` only,
    the other policies' grammars already allow a sentence without markers or quotes).
    """
    check_positive_int("n_sources", n_sources)
    check_marker_slots(n_sources, options.max_group)
    if policy is Policy.REQUIRED:
        body = _required_body(
            options, terms if options.source_terms else (), bound_words, count_words
        )
    elif policy is Policy.QUOTES_ONLY and options.verbatim_quotes and quote_sources is not None:
        if len(quote_sources) != n_sources:
            raise InvalidInputError(
                f"quote_sources holds {len(quote_sources)} texts but n_sources is {n_sources}; "
                "pass the texts of exactly the sources the markers number"
            )
        ids, rules = quote_rules(
            quote_sources, min_quote_chars=options.min_quote_chars,
            quotable_chars=options.quotable_chars,
        )
        body = _verbatim_quotes_body(ids, rules)
    elif policy is Policy.QUOTES_ONLY:
        body = _quotes_only_body(options.max_quote_chars)
    else:
        body = _auto_body()
    if refusal is not None and policy is Policy.REQUIRED:
        body = with_refusal(body, refusal)
    return f"{body}\n{_cite_group_rules(n_sources, options.max_group)}"


REFUSAL_FORBIDDEN = '"[]\n\r'
"""What a refusal sentence never holds: it would end the grammar's literal or write a marker."""


def refusal_flaw(text: str) -> str | None:
    """Why ``text`` cannot be a refusal sentence's grammar literal, or ``None`` if it can.

    Besides ``REFUSAL_FORBIDDEN``, a control character (NUL, tab, escape) or a lone surrogate:
    no grammar literal holds one, and a model never writes one as prose.
    """
    for offset, char in enumerate(text):
        if char in REFUSAL_FORBIDDEN:
            return (
                f"it holds {char!r} at character {offset}; a refusal sentence is one line "
                "without brackets or double quotes"
            )
        if unicodedata.category(char) in ("Cc", "Cs"):
            return (
                f"it holds U+{ord(char):04X} at character {offset} (a control character or lone "
                "surrogate; write printable text)"
            )
    return None


def with_refusal(body: str, refusal: str) -> str:
    """A grammar whose root is ``body``'s root or, as the whole answer, the ``refusal`` text."""
    if (flaw := refusal_flaw(refusal)) is not None:
        raise InvalidInputError(f"a refusal sentence cannot be {refusal[:80]!r}: {flaw}")
    literal = refusal.replace("\\", "\\\\")
    return f'root ::= answer | "{literal}"\nanswer ::= {body[len("root ::= "):]}'


def marker_grammar(n_sources: int, max_group: int = DEFAULT_MAX_GROUP) -> str:
    """The markers alone: any text without brackets, and cite-groups of markers in 1..N.

    Every policy's grammar accepts only strings this one accepts. A serving engine enforces it
    while citeformer's steering processor, inside the engine, enforces the policy's grammar: where
    that processor is missing, every marker is still ``[k]`` with 1 <= k <= N.
    """
    check_positive_int("n_sources", n_sources)
    GrammarOptions(max_group=max_group)  # checks it
    check_marker_slots(n_sources, max_group)
    prose = "[^\\[\\]]*"
    return f"root ::= {prose} (cite-group {prose})*\n{_cite_group_rules(n_sources, max_group)}"


def _required_body(
    options: GrammarOptions, terms: Sequence[str], bound_words: bool, count_words: bool
) -> str:
    # A word holds no space, bracket or sentence terminator, so a sentence can only end with a
    # cite-group followed by a terminator. The word count bound lands on a word boundary. (Where
    # a cite-group may not follow a comma is left to the steering levers: written here, as a last
    # word of its own, it makes every word ambiguous and the mask hundreds of times slower.)
    # A "." inside a word belongs to a dotted term spelled out literally, never to a pattern:
    # `digit "." digit` would let a model that meant to end a sentence after "3" be made to
    # invent "3.5". The terms cost about what the plain rule does (measured on SmolLM2's vocab).
    ends = options.sentence_ends
    char = "[^ \\t\\n\\r\\[\\].!?]"
    head = f"""\
root ::= sentence (" " sentence)*
sentence ::= words " "? cite-group [{ends}]
"""
    if not (bound_words or count_words or terms):
        # One run over the sentence's characters: a token that ends a word and begins the next
        # stays inside the rule (word_bound.py says what that saves).
        return head + f'words ::= {char} ({char} | " " {char})*'
    # A bounded run is the costliest rule to mask (141 µs a row against 58 for `+`, measured in
    # benchmarks/steering_speed.py's grammar section).
    word = f"word ::= {char}" + (f"{{1,{options.max_word_chars}}}" if bound_words else "+")
    if terms:
        edge = f"{char}{{0,{TERM_EDGE_CHARS}}}"
        spelled = " | ".join(f'"{term}"' for term in terms)
        # Left unbounded, a term's edges fill 1.6-4 times faster; WordBound bounds them then.
        if not bound_words:
            edge = f"{char}*"
        word += f" | {edge} term {edge}\nterm ::= {spelled}"
    count = f"{{0,{options.max_sentence_words - 1}}}" if count_words else "*"
    return head + f'words ::= word (" " word){count}\n{word}'


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
