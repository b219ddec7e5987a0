"""Decode cost of the readability processors (the default) against none of them (the grammar only).

    python benchmarks/readability_speed.py [--runs 3] [--tokens 96]

Arms alternate in one process on the same questions (REQUIRED, evidence lexical), so load on a
shared machine affects both alike. Two measures per arm:

- ``step_ms``: wall time of each decoding step's logits work (grammar mask, evidence and the
  readability processors), read from the batch processor, median and p99 over every step;
- ``decode_tokens_per_second``: (generated tokens - 1) over (the decode's wall time - the wall
  time of the same call with one new token), so that the prompt's time is left out.

The answers differ between arms (the processors end them earlier), so the rates compare different
token counts; ``ratio_from_steps`` compares like with like: the model's step time (the "off" rate)
plus each arm's logits work. Writes benchmarks/results/readability_speed.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from citebench.data import load_dataset  # noqa: E402
from citebench.metrics import quantiles  # noqa: E402

from citeformer import CiteGenerator, build_request  # noqa: E402

ARMS = {"default": {}, "off": {"readability": None}}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    gen = CiteGenerator.default(progress=False)
    engine = gen.engine
    items = [i for i in load_dataset("technical") if i.split == "dev"][:3]
    rates: dict[str, list[float]] = {arm: [] for arm in ARMS}
    steps: dict[str, list[float]] = {arm: [] for arm in ARMS}
    for _ in range(args.runs):
        for item in items:
            for arm, options in ARMS.items():
                one = build_request(item.question, item.sources(), max_new_tokens=1, **options)
                full = one.replace(max_new_tokens=args.tokens)
                started = time.perf_counter()
                engine.run([engine.prepare(one)])
                first = time.perf_counter() - started
                started = time.perf_counter()
                decoded = engine.run([engine.prepare(full)])
                seconds = time.perf_counter() - started - first
                tokens = len(decoded.ids[0])
                steps[arm] += decoded.step_seconds
                if tokens > 1 and seconds > 0:
                    rates[arm].append((tokens - 1) / seconds)
    result: dict[str, object] = {
        arm: {
            "decode_tokens_per_second": quantiles(rates[arm]),
            "step_ms": {"median": statistics.median(steps[arm]) * 1000,
                        "p99": sorted(steps[arm])[int(0.99 * (len(steps[arm]) - 1))] * 1000},
        }
        for arm in ARMS
    }
    off_rate = statistics.median(rates["off"])
    # Per token: the off arm's time, plus whatever more logits work the default does per step.
    extra = statistics.median(steps["default"]) - statistics.median(steps["off"])
    result["ratio_from_steps"] = (1 / off_rate) / (1 / off_rate + extra)
    result["ratio_of_rates"] = statistics.median(rates["default"]) / off_rate
    print(f"logits work per step (median ms): default {result['default']['step_ms']['median']:.2f}"
          f", off {result['off']['step_ms']['median']:.2f}; decode tokens/s median: default "
          f"{statistics.median(rates['default']):.1f}, off {off_rate:.1f}; ratio from steps "
          f"{result['ratio_from_steps']:.3f}, ratio of rates {result['ratio_of_rates']:.2f}")
    out = Path(__file__).resolve().parent / "results" / "readability_speed.json"
    out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
