"""Many questions at once: ``CiteGenerator.answer_batch`` against one ``answer`` call per question.

    python benchmarks/batch.py                   # default run (REQUIRED), results/batch.json
    python benchmarks/batch.py --quick           # smoke run, about a minute
    python benchmarks/batch.py --policy auto --threads 2 --sizes 1 8 32 --tokens 48 128

Every arm answers benchmark questions (``--policy``, the default lexical evidence, greedy) with
the embedded model and runs exactly the steps of ``answer_batch``: ``citeformer.decoding``'s
``prepare_all``, ``plan_batches``, ``decode`` (one left-padded ``model.generate`` per batch) and
``answer_of`` (the re-checked answer); a batch of one is what ``answer`` runs. Each row is made to
write exactly its token budget (the model's ``min_new_tokens``), so that every arm does the same
work and rates compare across arms whatever the grammar does to answer lengths.

Measured, with torch's thread count fixed:
- ``end_to_end``: short (about ``--short-tokens``) and long (``--long-tokens``) prompts, for each
  budget of ``--tokens``: tokens / wall time (prompt rendering, prefill and answer checks
  included) of ``--batch`` rows batched with the grammar, the same batch without any grammar
  (``constrained=False``), and rows one at a time with the grammar (every row in the first case,
  the first ``--sequential-rows`` in the others: a row alone costs the same whichever it is).
  Each arm also gives its decode rate: tokens after each row's first / time after the first step.
- ``sizes``: tokens/s and peak memory per batch size (``--sizes``), and the time of the masks and
  biases per step (median, p99) against the whole step.

``results/batch.json`` keeps the last run of each policy (``runs.<policy>``). Peak memory is the
process's resident set size (RSS), sampled every 5 ms during the run; the increase over the RSS
just before the run is given too (freed memory may stay with the process, so increases after a
larger earlier run read low). The machine load (``os.getloadavg``) is recorded before and after.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "core")]

import torch  # noqa: E402
from citebench.data import Item, load_items  # noqa: E402
from transformers.generation.streamers import BaseStreamer  # noqa: E402

from citeformer import CiteGenerator, GenerationRequest, Source, build_request  # noqa: E402
from citeformer.decoding import batching  # noqa: E402


@dataclass(frozen=True)
class Settings:
    threads: int
    batch: int
    tokens: list[int]
    sizes: list[int]
    size_tokens: int
    sequential_rows: int
    short_tokens: int
    long_tokens: int
    policy: str


DEFAULT = Settings(threads=1, batch=8, tokens=[48, 128], sizes=[1, 4, 8, 16, 32], size_tokens=32,
                   sequential_rows=2, short_tokens=300, long_tokens=800, policy="required")
QUICK = Settings(threads=1, batch=4, tokens=[8], sizes=[1, 4], size_tokens=8, sequential_rows=2,
                 short_tokens=300, long_tokens=800, policy="required")


class StepClock(BaseStreamer):
    """When each decoding step's tokens leave ``generate`` (the first ``put`` is the prompt)."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self._prompt_seen = False

    def put(self, value: torch.Tensor) -> None:
        if self._prompt_seen:
            self.times.append(time.perf_counter())
        self._prompt_seen = True

    def end(self) -> None:
        pass


class PeakRss:
    """The largest resident set size seen while the block runs, sampled from /proc."""

    def __init__(self) -> None:
        self.baseline = self.peak = _rss()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._done.set()
        self._thread.join()

    def _sample(self) -> None:
        while not self._done.wait(0.005):
            self.peak = max(self.peak, _rss())


def _rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@contextlib.contextmanager
def exact_length(gen: CiteGenerator, tokens: int) -> Iterator[None]:
    """Every row writes exactly ``tokens`` tokens: end of sequence is held back until then."""
    config = gen.model.generation_config
    before = config.min_new_tokens
    config.min_new_tokens = tokens
    try:
        yield
    finally:
        config.min_new_tokens = before


def run_arm(gen: CiteGenerator, requests: Sequence[GenerationRequest], batch_size: int
            ) -> dict[str, Any]:
    """Answer ``requests`` as ``answer_batch`` does, timing each step of each batch."""
    started = time.perf_counter()
    engine = gen.engine
    rows = batching.prepare_all(engine.prepare, requests)
    generated = decode_seconds = 0.0
    step_gaps: list[float] = []
    mask: list[float] = []
    with PeakRss() as memory:
        for indices in batching.plan_batches(rows, batch_size):
            clock = StepClock()
            decoded = engine.run([rows[i] for i in indices], streamer=clock)
            for i, ids in zip(indices, decoded.ids, strict=True):
                engine.finish(rows[i], ids)
                # Tokens after each row's first: the decode phase, prefill excluded.
                generated += len(ids) - 1
            decode_seconds += clock.times[-1] - clock.times[0]
            step_gaps += [b - a for a, b in zip(clock.times, clock.times[1:], strict=False)]
            mask += decoded.step_seconds[1:]
    wall = time.perf_counter() - started
    tokens = int(generated) + len(rows)
    return {
        "rows": len(rows),
        "batch_size": batch_size,
        "tokens": tokens,
        "wall_s": wall,
        "end_to_end_tps": tokens / wall,
        "decode_tps": generated / decode_seconds,
        "step_s": _quantiles(step_gaps),
        "mask_s": _quantiles(mask),
        "peak_rss_mb": memory.peak / 2**20,
        "rss_increase_mb": (memory.peak - memory.baseline) / 2**20,
    }


def _quantiles(values: Sequence[float]) -> dict[str, float] | None:
    if not values:
        return None
    ordered = sorted(values)
    return {
        "median": statistics.median(ordered),
        "p99": ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))],
        "n": len(ordered),
    }


def requests_for(gen: CiteGenerator, items: Sequence[Item], count: int, prompt_tokens: int,
                 tokens: int, policy: str) -> list[GenerationRequest]:
    """``count`` questions, each with its own passages and then passages of the following
    questions until its prompt has about ``prompt_tokens`` tokens (at most that many)."""
    requests = []
    for i in range(count):
        item = items[i % len(items)]
        sources: list[Source] = item.sources()

        def length() -> int:
            prompt = gen.prompt(item.question, sources, policy)  # noqa: B023
            return len(gen.tokenizer(prompt, add_special_tokens=False).input_ids)

        j = i + 1
        while length() < prompt_tokens:
            sources += items[j % len(items)].sources()
            j += 1
        while len(sources) > 1 and length() > prompt_tokens:
            sources.pop()
        requests.append(build_request(item.question, sources, policy, max_new_tokens=tokens))
    return requests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke run with tiny sizes")
    parser.add_argument("--threads", type=int, help="torch threads (default 1)")
    parser.add_argument("--batch", type=int, help="batch size of the decode and end-to-end arms")
    parser.add_argument("--tokens", type=int, nargs="+", help="token budgets, end to end")
    parser.add_argument("--sizes", type=int, nargs="+", help="batch sizes of the size sweep")
    parser.add_argument("--size-tokens", type=int, help="tokens per row in the size sweep")
    parser.add_argument("--sequential-rows", type=int, help="rows run one at a time per case")
    parser.add_argument("--short-tokens", type=int, help="prompt tokens of the short prompts")
    parser.add_argument("--long-tokens", type=int, help="prompt tokens of the long prompts")
    parser.add_argument("--policy", choices=["required", "auto", "quotes_only"])
    parser.add_argument("--out", type=Path, default=HERE / "results" / "batch.json")
    args = parser.parse_args()
    base = QUICK if args.quick else DEFAULT
    settings = Settings(**{
        name: getattr(args, name) if getattr(args, name) is not None else value
        for name, value in vars(base).items()
    })
    torch.set_num_threads(settings.threads)
    load_before = os.getloadavg()
    started = time.perf_counter()
    gen = CiteGenerator.default(progress=False)
    items = load_items()
    report: dict[str, Any] = {
        "settings": vars(settings),
        "torch_threads": torch.get_num_threads(),
        "machine": f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs",
        "versions": {"torch": torch.__version__, "python": platform.python_version()},
        "load_before": load_before,
    }
    with exact_length(gen, 4):  # warm-up: grammar compiles, first-call allocations
        run_arm(gen, requests_for(gen, items, 2, settings.short_tokens, 4, settings.policy), 2)

    report["end_to_end"] = end_to_end_section(gen, items, settings)
    report["sizes"] = sizes_section(gen, items, settings)
    report["load_after"] = os.getloadavg()
    report["wall_s"] = time.perf_counter() - started
    # One file keeps the last run of each policy.
    runs = json.loads(args.out.read_text()).get("runs", {}) if args.out.is_file() else {}
    runs[settings.policy] = report
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"runs": runs}, indent=2) + "\n")
    print(f"wall {report['wall_s']:.0f} s, load before {load_before}, after "
          f"{report['load_after']}; wrote {args.out}", flush=True)


def end_to_end_section(gen: CiteGenerator, items: Sequence[Item], s: Settings
                       ) -> list[dict[str, Any]]:
    cases = []
    for prompt_tokens in (s.short_tokens, s.long_tokens):
        for tokens in s.tokens:
            bound = requests_for(gen, items, s.batch, prompt_tokens, tokens, s.policy)
            free = [r.replace(constrained=False) for r in bound]
            # The first case runs every row one at a time too: it is the decode comparison.
            alone = s.batch if not cases else s.sequential_rows
            with exact_length(gen, tokens):
                arms = {
                    "unconstrained": run_arm(gen, free, s.batch),
                    "constrained": run_arm(gen, bound, s.batch),
                    "sequential": run_arm(gen, bound[:alone], 1),
                }
            lengths = [len(row.prompt_ids) for row in batching.prepare_all(gen, bound)]
            case = {
                "prompt_tokens": {"min": min(lengths), "max": max(lengths)},
                "new_tokens": tokens,
                **arms,
                "constrained_vs_unconstrained": (
                    arms["constrained"]["end_to_end_tps"] / arms["unconstrained"]["end_to_end_tps"]
                ),
                "batched_vs_sequential": (
                    arms["constrained"]["end_to_end_tps"] / arms["sequential"]["end_to_end_tps"]
                ),
                "decode_batched_vs_sequential": (
                    arms["constrained"]["decode_tps"] / arms["sequential"]["decode_tps"]
                ),
            }
            cases.append(case)
            print(f"prompts {min(lengths)}-{max(lengths)} tokens, {tokens} new, {s.batch} rows: "
                  f"end to end constrained {arms['constrained']['end_to_end_tps']:.1f} tok/s, "
                  f"unconstrained {arms['unconstrained']['end_to_end_tps']:.1f} "
                  f"({case['constrained_vs_unconstrained']:.2f}x), one at a time "
                  f"{arms['sequential']['end_to_end_tps']:.1f} "
                  f"({case['batched_vs_sequential']:.2f}x); decode "
                  f"{arms['constrained']['decode_tps']:.1f} against "
                  f"{arms['sequential']['decode_tps']:.1f} one at a time "
                  f"({case['decode_batched_vs_sequential']:.2f}x)", flush=True)
    return cases


def sizes_section(gen: CiteGenerator, items: Sequence[Item], s: Settings) -> list[dict[str, Any]]:
    rows = []
    for size in s.sizes:
        requests = requests_for(gen, items, size, s.short_tokens, s.size_tokens, s.policy)
        with exact_length(gen, s.size_tokens):
            arm = run_arm(gen, requests, size)
        rows.append(arm)
        mask, step = arm["mask_s"], arm["step_s"]
        print(f"batch {size:>3}: {arm['end_to_end_tps']:.1f} tok/s end to end, "
              f"{arm['decode_tps']:.1f} decode; peak RSS {arm['peak_rss_mb']:.0f} MB "
              f"(+{arm['rss_increase_mb']:.0f}); step median {step['median'] * 1e3:.1f} ms, "
              f"masks median {mask['median'] * 1e3:.2f} ms p99 {mask['p99'] * 1e3:.2f} ms",
              flush=True)
    return rows


if __name__ == "__main__":
    main()
