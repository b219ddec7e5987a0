"""Verbatim quotes: what the quote index costs to build, cold and cached, against the same
automaton written as GBNF and compiled by xgrammar, and the quote mask's time per token."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import xgrammar as xgr

from citebench.data import load_items
from citebench.speed import quantiles
from citeformer import CiteGenerator, Policy, Source, build_grammar
from citeformer.decoding.quote_guard import QuoteGuard, source_index
from citeformer.decoding.vocab import SortedVocab

Log = Callable[[str], None]
DOCS = Path(__file__).resolve().parents[2] / "examples" / "docs"


def passages(count: int, chars: int) -> list[Source]:
    """``count`` passages of ``chars`` characters cut, in order, from the example documents and
    then the passages of the labeled set."""
    texts = [p.read_text() for p in sorted(DOCS.glob("*.md"))]
    texts += [p.text for item in load_items() for p in item.passages]
    text = " ".join(texts)
    if len(text) < count * chars:
        raise ValueError(f"the corpus holds {len(text)} characters, fewer than {count} x {chars}")
    return [Source(text[i * chars:(i + 1) * chars]) for i in range(count)]


def run(gen: CiteGenerator, shapes: list[tuple[int, int]], runs: int, log: Log) -> dict[str, Any]:
    vocab = gen.engine.vocab.sorted  # built once per vocabulary; timed separately below
    rows = []
    for count, chars in shapes:
        sources = passages(count, chars)
        cold, cached = [], []
        for _ in range(runs):
            source_index.cache_clear()
            cold.append(_time_guard(sources, vocab))
            cached.append(_time_guard(sources, vocab))
        compiler = xgr.GrammarCompiler(gen.tokenizer_info, cache_enabled=False)
        grammar = build_grammar(count, Policy.QUOTES_ONLY, quote_sources=sources)
        started = time.perf_counter()
        compiler.compile_grammar(grammar)
        gbnf_s = time.perf_counter() - started
        row = {
            "passages": count, "chars": chars, "guard_cold_s": quantiles(cold),
            "guard_cached_s": quantiles(cached), "gbnf_compile_s": gbnf_s,
            "gbnf_chars": len(grammar), "mask_ms": _mask_times(gen, sources),
        }
        rows.append(row)
        log(f"quotes {count} x {chars}: guard cold {row['guard_cold_s']['median'] * 1e3:.1f} ms, "
            f"cached {row['guard_cached_s']['median'] * 1e3:.2f} ms; GBNF compile {gbnf_s:.2f} s; "
            f"mask median {row['mask_ms']['in_quote']['median']:.2f} ms in a quote, "
            f"{row['mask_ms']['opening']:.2f} ms opening it")
    source_index.cache_clear()
    started = time.perf_counter()
    SortedVocab(gen.tokenizer_info.decoded_vocab)
    return {"rows": rows, "runs": runs, "vocab_index_s": time.perf_counter() - started}


def _time_guard(sources: list[Source], vocab: SortedVocab) -> float:
    # Everything a generation pays before its first quote token: the indexes and the mask of a
    # quote's first token, the costliest one.
    started = time.perf_counter()
    guard = QuoteGuard(sources, vocab)
    guard.advance(_token_id(vocab, b'"'))
    guard.mask()
    return time.perf_counter() - started


def _mask_times(gen: CiteGenerator, sources: list[Source]) -> dict[str, Any]:
    # Teacher-forced: a 200-character quote of the middle passage, tokenized as the model would
    # write it, stepped token by token with the mask computed before each.
    middle = len(sources) // 2
    text = sources[middle].text
    start = text.index(" ", 300) + 1
    quote = " ".join(text[start:start + 200].split()[:-1])
    answer = f'The source says "{quote}" [{middle + 1}].'
    ids = gen.tokenizer(answer, add_special_tokens=False).input_ids
    guard = QuoteGuard(sources, gen.engine.vocab.sorted)
    in_quote, opening = [], 0.0
    for token in ids:
        started = time.perf_counter()
        mask = guard.mask()
        elapsed = (time.perf_counter() - started) * 1e3
        if guard.state[0] == "in" and guard.state[2]:
            in_quote.append(elapsed)
        elif guard.state[0] == "in":
            opening = elapsed
        assert (token in mask.ids) == mask.allow, "the quote mask removed a verbatim token"
        guard.advance(token)
    return {"in_quote": quantiles(in_quote), "opening": opening, "tokens": len(in_quote)}


def _token_id(vocab: SortedVocab, data: bytes) -> int:
    return vocab.token_bytes.index(data)
