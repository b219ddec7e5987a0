"""Time the passage chunker of ``citeformer ask`` on adversarial white space and on long prose.

    python benchmarks/chunking.py                  # prints, writes results/chunking.json
    python benchmarks/chunking.py --spaces 10000 20000 --prose-mb 2 --output /tmp/c.json
    python benchmarks/chunking.py --chunker mymodule:chunk_text   # time another chunker

Inputs, all generated here: a word, N white-space characters, a word, in three shapes (plain
spaces, spaces after a full stop, space-newline pairs), for N from 10 thousand to 1 million; and
about 20 MB of prose (seeded random sentences of common words, wrapped at 80 columns, blank lines
between paragraphs), cut with the default passage bound. Each time is the best of ``--repeat``
runs (one run for inputs that take over a second). The chunker runs before any embedding, on every
file ``--docs`` names, so its time is a floor on the command's.
"""

from __future__ import annotations

import argparse
import importlib
import json
import platform
import random
import sys
import textwrap
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT_CHUNKER = "citeformer.app.chunking:chunk_text"
SHAPES: dict[str, Callable[[int], str]] = {
    "word, N spaces, word": lambda n: "word" + " " * n + "word",
    "word., N spaces, word": lambda n: "word." + " " * n + "word",
    "word, N/2 ' \\n' pairs, word": lambda n: "word" + " \n" * (n // 2) + "word",
}
WORDS = [
    "the", "of", "and", "to", "in", "is", "was", "for", "on", "that", "with", "as", "by", "it",
    "at", "from", "his", "an", "were", "are", "which", "this", "be", "first", "city", "river",
    "tower", "built", "years", "century", "people", "world", "water", "during", "later",
    "known", "used", "between", "through", "government", "state", "time", "after", "since",
    "most", "called", "under", "several", "two", "three", "early", "large", "part", "area",
    "north", "south", "war", "name", "new", "work", "system", "species", "form", "found",
    "made",
]

Chunker = Callable[[str, int], Sequence[Any]]


def prose(megabytes: float, seed: int = 0) -> str:
    """About ``megabytes`` MB of wrapped prose paragraphs, the same for the same seed."""
    rng = random.Random(seed)
    target = int(megabytes * 1_000_000)
    paragraphs: list[str] = []
    size = 0
    while size < target:
        sentences = []
        for _ in range(rng.randint(2, 9)):
            words = rng.choices(WORDS, k=rng.randint(6, 28))
            sentences.append(" ".join(words).capitalize() + rng.choice(".....!?"))
        paragraph = textwrap.fill(" ".join(sentences), width=80)
        paragraphs.append(paragraph)
        size += len(paragraph) + 2
    return "\n\n".join(paragraphs)


def timed(chunk: Chunker, text: str, max_chars: int, repeat: int) -> tuple[float, int]:
    """Best time of up to ``repeat`` runs, and the number of passages."""
    best = float("inf")
    passages = 0
    for _ in range(repeat):
        started = time.perf_counter()
        passages = len(chunk(text, max_chars))
        best = min(best, time.perf_counter() - started)
        if best > 1.0:  # a slow input: one run says enough
            break
    return best, passages


def load_chunker(name: str) -> Chunker:
    module, _, function = name.partition(":")
    chunk: Chunker = getattr(importlib.import_module(module), function)
    return chunk


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spaces", type=int, nargs="+",
                        default=[10_000, 20_000, 40_000, 100_000, 1_000_000],
                        help="white-space run lengths (default: 10k 20k 40k 100k 1M)")
    parser.add_argument("--prose-mb", type=float, default=20.0,
                        help="megabytes of generated prose (default: 20)")
    parser.add_argument("--max-chars", type=int, default=600,
                        help="passage bound (default: 600, the command line's)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--chunker", default=DEFAULT_CHUNKER,
                        help="MODULE:FUNCTION(text, max_chars) to time "
                        f"(default: {DEFAULT_CHUNKER})")
    parser.add_argument("--output", type=Path, default=HERE / "results" / "chunking.json")
    args = parser.parse_args(argv)

    chunk = load_chunker(args.chunker)
    print(f"chunker {args.chunker}, passages of at most {args.max_chars} characters")
    whitespace = []
    for shape, build in SHAPES.items():
        for n in args.spaces:
            seconds, passages = timed(chunk, build(n), args.max_chars, args.repeat)
            whitespace.append({"shape": shape, "n": n, "seconds": seconds, "passages": passages})
            print(f"  {shape:<30} N={n:>9,}: {seconds:8.4f} s ({passages} passages)", flush=True)

    text = prose(args.prose_mb)
    seconds, passages = timed(chunk, text, args.max_chars, args.repeat)
    lines = text.count("\n") + 1
    print(f"  prose {len(text) / 1e6:.1f} MB, {lines:,} lines: {seconds:.3f} s "
          f"({passages:,} passages, {len(text) / 1e6 / seconds:.1f} MB/s)")

    results = {
        "chunker": args.chunker,
        "max_chars": args.max_chars,
        "whitespace": whitespace,
        "prose": {"megabytes": len(text) / 1e6, "lines": lines, "seconds": seconds,
                  "passages": passages},
        "machine": {"python": platform.python_version(), "platform": platform.platform(),
                    "processor": platform.processor() or platform.machine()},
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
