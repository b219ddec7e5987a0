"""Greedy answers of every stored benchmark question, to tell whether a change altered any.

    python benchmarks/same_answers.py record before.json            # every question, each policy
    python benchmarks/same_answers.py record after.json --engine llama-cpp
    python benchmarks/same_answers.py compare before.json after.json

``record`` answers every question of both labeled sets (dev and test splits) under each policy
with the embedded model, greedy, today's defaults, ``--max-new-tokens`` new tokens, decoded in
batches of ``--batch-size`` (``answer_batch``), and writes every answer text and finish reason.
``compare`` counts the answers whose text or finish reason differ and prints each one that does;
it exits 1 if any differs. A refactor that keeps behaviour shows 0 differences; a change of
generation shows what it changed, answer by answer.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from citebench.data import DATASETS, load_dataset  # noqa: E402

from citeformer import Policy, build_request  # noqa: E402


def record(path: Path, *, max_new_tokens: int, batch_size: int, threads: int,
           policies: list[str], engine: str, dtype: str) -> None:
    import torch

    torch.set_num_threads(threads)
    gen = _generator(engine, dtype)
    answers: dict[str, Any] = {}
    for dataset in DATASETS:
        items = load_dataset(dataset)
        for policy in map(Policy.coerce, policies):
            requests = [
                build_request(item.question, item.sources(), policy, max_new_tokens=max_new_tokens)
                for item in items
            ]
            started = time.perf_counter()
            produced = gen.answer_batch(requests, batch_size=batch_size)
            print(f"{dataset} {policy.value}: {len(items)} answers in "
                  f"{time.perf_counter() - started:.0f}s", flush=True)
            for item, answer in zip(items, produced, strict=True):
                answers[f"{dataset}/{policy.value}/{item.id}"] = {
                    "text": answer.text, "finish_reason": answer.finish_reason,
                }
    path.write_text(json.dumps({
        "engine": engine, "dtype": str(getattr(getattr(gen, "model", None), "dtype", None)),
        "max_new_tokens": max_new_tokens, "batch_size": batch_size,
        "answers": answers,
    }, indent=1, ensure_ascii=False))
    print(f"wrote {len(answers)} answers to {path}")


def compare(before: Path, after: Path) -> int:
    old, new = (json.loads(p.read_text()) for p in (before, after))
    for key in ("max_new_tokens", "batch_size"):
        if old[key] != new[key]:
            print(f"warning: {key} differs ({old[key]} against {new[key]})")
    keys = sorted(old["answers"].keys() | new["answers"].keys())
    differ = [k for k in keys if old["answers"].get(k) != new["answers"].get(k)]
    for key in differ:
        print(f"{key}:\n  before {old['answers'].get(key)}\n  after  {new['answers'].get(key)}")
    print(f"{len(keys) - len(differ)} of {len(keys)} answers identical, {len(differ)} differ")
    return 1 if differ else 0


def _generator(engine: str, dtype: str) -> Any:
    if engine == "transformers":
        from citeformer import CiteGenerator

        return CiteGenerator.default(progress=False, dtype=dtype)
    raise SystemExit(f"unknown engine {engine!r}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    rec = commands.add_parser("record", help="answer every question and write the answers")
    rec.add_argument("out", type=Path)
    rec.add_argument("--max-new-tokens", type=int, default=100)
    rec.add_argument("--batch-size", type=int, default=8)
    rec.add_argument("--threads", type=int, default=2)
    rec.add_argument("--policies", nargs="+", default=[p.value for p in Policy])
    rec.add_argument("--engine", default="transformers")
    rec.add_argument("--dtype", default="auto",
                     help="the model's dtype (auto, float32, bfloat16); stored answers: float32")
    cmp = commands.add_parser("compare", help="count the answers that differ")
    cmp.add_argument("before", type=Path)
    cmp.add_argument("after", type=Path)
    args = parser.parse_args(argv)
    if args.command == "compare":
        return compare(args.before, args.after)
    record(args.out, max_new_tokens=args.max_new_tokens, batch_size=args.batch_size,
           threads=args.threads, policies=args.policies, engine=args.engine, dtype=args.dtype)
    return 0


if __name__ == "__main__":
    sys.exit(main())
