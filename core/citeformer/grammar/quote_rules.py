"""Verbatim quotes as GBNF rules: the automaton of ``citeformer.grammar.automata`` as a grammar.

Serving engines take the grammar as text, so there the quotes each source allows are spelled as
rules ``quote-k``; local generation enforces the same automaton with
``citeformer.decoding.quote_guard.QuoteGuard`` instead, which builds far faster than xgrammar
compiles these rules (benchmarks/README.md, "Verbatim quotes").
"""

from __future__ import annotations

from collections.abc import Sequence

from citeformer.grammar.automata import SENTINEL, SPACE, QuotableText, WordAutomaton
from citeformer.grammar.quotes import DEFAULT_MIN_QUOTE_CHARS, DEFAULT_QUOTABLE_CHARS
from citeformer.types import Source

__all__ = ["quote_rules"]


def quote_rules(
    sources: Sequence[Source],
    *,
    min_quote_chars: int = DEFAULT_MIN_QUOTE_CHARS,
    quotable_chars: int = DEFAULT_QUOTABLE_CHARS,
) -> tuple[list[int], list[str]]:
    """GBNF rules ``quote-k`` accepting exactly the quotes ``QuoteGuard`` allows from source k.

    Returns the source ids that have a rule (a source with no quote of ``min_quote_chars``
    characters gets none) and the rule lines. The automaton runs over characters; a quote starts
    in one of several states (one per boundary character before it), so rules stand for sets of
    states, made deterministic as they are written. The first ``min_quote_chars`` characters are
    spelled as literal strings leading to the set they reach, so the minimum costs no states.
    """
    ids: list[int] = []
    lines: list[str] = []
    for k, source in enumerate(sources, start=1):
        rules = _source_rules(k, QuotableText.fold(source.text, quotable_chars), min_quote_chars)
        if rules:
            ids.append(k)
            lines += rules
    return ids, lines


def _source_rules(k: int, quotable: QuotableText, min_chars: int) -> list[str]:
    automaton = WordAutomaton([ord(c) for c in s] for s in quotable.segments())
    nxt, reach, closable = automaton.next, automaton.reach, automaton.closable

    def read(states: frozenset[int], symbol: int) -> frozenset[int]:
        return frozenset(nxt[s][symbol] for s in states if symbol in nxt[s])

    def symbols(states: frozenset[int]) -> list[int]:
        return sorted({c for s in states for c in nxt[s]} - {SENTINEL})

    heads: dict[str, frozenset[int]] = {}
    frontier = [("", frozenset(automaton.starts))]
    while frontier:
        spelled, states = frontier.pop()
        if len(spelled) == min_chars:
            heads[spelled] = states
            continue
        for symbol in symbols(states):
            if symbol == SPACE and not spelled:
                continue
            target = frozenset(
                t for t in read(states, symbol) if len(spelled) + 1 + reach[t] >= min_chars
            )
            if target:
                frontier.append((spelled + chr(symbol), target))
    if not heads:
        return []
    names: dict[frozenset[int], str] = {}
    pending: list[frozenset[int]] = []

    def name_of(states: frozenset[int]) -> str:
        if states not in names:
            names[states] = f"quote-{k}-{len(names)}"
            pending.append(states)
        return names[states]

    lines = [
        f"quote-{k} ::= " + " | ".join(
            f'"{_escape(s)}" {name_of(states)}' for s, states in sorted(heads.items())
        )
    ]
    while pending:
        states = pending.pop()
        alternatives = [
            f'"{_escape(chr(symbol))}" {name_of(read(states, symbol))}'
            for symbol in symbols(states)
        ]
        if any(closable[s] for s in states):
            alternatives.append('""')
        lines.append(f"{names[states]} ::= {' | '.join(alternatives)}")
    return lines


def _escape(text: str) -> str:
    out = []
    for char in text:
        if char in '"\\':
            out.append("\\" + char)
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\x{ord(char):02X}")
        else:
            out.append(char)
    return "".join(out)
