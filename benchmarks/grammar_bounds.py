"""What a grammar costs to compile at the bounds of its options, and past them.

    python benchmarks/grammar_bounds.py [--past]

Each case builds a ``REQUIRED`` grammar (``build_grammar``, words bounded in the grammar as a
serving engine is sent it, the costlier form) and compiles it once with xgrammar's cache off, on
Llama 3's 128k-token vocabulary (the largest the tests carry, from llama-cpp-python's sdist).
Printed and written to benchmarks/results/grammar_bounds.json: the grammar's size, the compile's
wall time, xgrammar's ``memory_size_bytes`` of the compiled grammar, and the process's peak RSS
so far. The cases are the corners of ``citeformer.grammar.OPTION_LIMITS``, ``MAX_TERMS``,
``MAX_TERM_CHARS`` and ``MAX_MARKER_SLOTS``; ``--past`` adds cases past them (built with the
bounds lifted, as they were measured before they existed; minutes and GB each).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parent / "core")]

import xgrammar as xgr  # noqa: E402

from citeformer.grammar import rules  # noqa: E402
from tests.vocab import family_tokenizer  # noqa: E402

RESULTS = HERE / "results" / "grammar_bounds.json"
WIDEST = {"max_word_chars": 128, "max_sentence_words": 1000}


def terms(count: int, chars: int) -> list[str]:
    """``count`` distinct dotted terms of ``chars`` characters, none a prefix of another."""
    return [f"{'a' * (chars // 2)}{i}.{'b' * (chars - chars // 2 - 2 - len(str(i)))}"
            for i in range(count)]


CASES: list[tuple[str, dict[str, Any]]] = [
    ("defaults, 5 sources", {"n_sources": 5}),
    ("defaults, 5 sources, 64 terms of 32", {"n_sources": 5, "terms": terms(64, 32)}),
    ("widest words and sentences, 256 terms of 128",
     {"n_sources": 5, **WIDEST, "terms": terms(256, 128)}),
    ("1000 sources, max_group 3, widest, 256 terms",
     {"n_sources": 1000, "max_group": 3, **WIDEST, "terms": terms(256, 128)}),
    ("300 sources, max_group 10, widest, 256 terms",
     {"n_sources": 300, "max_group": 10, **WIDEST, "terms": terms(256, 128)}),
    ("3000 sources, max_group 1, widest, 256 terms",
     {"n_sources": 3000, "max_group": 1, **WIDEST, "terms": terms(256, 128)}),
]
PAST: list[tuple[str, dict[str, Any]]] = [
    ("max_word_chars 256, 64 terms of 256",
     {"n_sources": 5, "max_word_chars": 256, "terms": terms(64, 256)}),
    ("1000 sources, max_group 10", {"n_sources": 1000, "max_group": 10}),
]


@contextlib.contextmanager
def bounds_lifted() -> Iterator[None]:
    saved = (dict(rules.OPTION_LIMITS), rules.MAX_TERM_CHARS, rules.MAX_MARKER_SLOTS)
    limits: dict[str, int] = rules.OPTION_LIMITS  # type: ignore[assignment]
    limits.update({name: 10**9 for name in limits})
    rules.MAX_TERM_CHARS, rules.MAX_MARKER_SLOTS = 10**9, 10**12
    try:
        yield
    finally:
        limits.update(saved[0])
        rules.MAX_TERM_CHARS, rules.MAX_MARKER_SLOTS = saved[1], saved[2]


def measure(compiler: xgr.GrammarCompiler, label: str, options: dict[str, Any]) -> dict[str, Any]:
    grammar = rules.build_grammar(**options)
    started = time.perf_counter()
    compiled = compiler.compile_grammar(grammar)
    seconds = time.perf_counter() - started
    row = {
        "case": label, "grammar_kb": round(len(grammar) / 1e3, 1),
        "compile_s": round(seconds, 2),
        "compiled_mb": round(compiled.memory_size_bytes / 1e6, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3),
    }
    print(f"{label:48s} {row['grammar_kb']:8.1f} KB {seconds:7.2f} s "
          f"{row['compiled_mb']:6.1f} MB  peak RSS {row['peak_rss_mb']} MB", flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--past", action="store_true", help="add cases past the bounds")
    args = parser.parse_args()
    tokenizer = family_tokenizer("llama-bpe")
    info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=len(tokenizer))
    compiler = xgr.GrammarCompiler(info, cache_enabled=False)
    print(f"{'case':48s} {'grammar':>11s} {'compile':>9s} {'compiled':>9s}")
    rows = [measure(compiler, label, options) for label, options in CASES]
    if args.past:
        with bounds_lifted():
            rows += [{**measure(compiler, label, options), "past_the_bounds": True}
                     for label, options in PAST]
    RESULTS.write_text(json.dumps({"vocabulary": "llama-bpe (128,256 tokens)", "rows": rows},
                                  indent=1) + "\n")
    print(f"written to {RESULTS.relative_to(HERE.parent)}")


if __name__ == "__main__":
    main()
