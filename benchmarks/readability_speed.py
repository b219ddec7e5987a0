"""Decode rate of ``generate`` with the readability processors (the default) and without them.

    python benchmarks/readability_speed.py [--runs 5] [--tokens 96]

Arms alternate in one process on the same question (REQUIRED, evidence lexical), so load on a
shared machine affects both alike; each run's rate is generated tokens over wall time, prompt
included. Writes benchmarks/results/readability_speed.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from citebench.data import load_dataset  # noqa: E402
from citebench.metrics import quantiles  # noqa: E402

from citeformer import CiteGenerator  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    gen = CiteGenerator.default(progress=False)
    items = [i for i in load_dataset("technical") if i.split == "dev"][:3]
    rates: dict[str, list[float]] = {"default": [], "off": []}
    for _ in range(args.runs):
        for item in items:
            for arm, options in (("default", {}), ("off", {"readability": None})):
                started = time.perf_counter()
                answer = gen.generate(item.question, item.sources(),
                                      max_new_tokens=args.tokens, **options)
                rates[arm].append(answer.generated_tokens / (time.perf_counter() - started))
    result = {arm: quantiles(values) for arm, values in rates.items()}
    ratio = result["default"]["median"] / result["off"]["median"]
    result["ratio_default_over_off"] = ratio
    print(f"tokens/s median: default {result['default']['median']:.1f}, "
          f"off {result['off']['median']:.1f}, ratio {ratio:.2f}")
    out = Path(__file__).resolve().parent / "results" / "readability_speed.json"
    out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
