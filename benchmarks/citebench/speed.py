"""Speed: decode rate with and without the grammar, time to first token, compile, mask, load.

Every timing is wall-clock ``time.perf_counter``; arms that are compared run alternately in the same
process so that load on a shared machine affects both alike.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
import xgrammar as xgr
from transformers import LogitsProcessorList
from transformers.generation.streamers import BaseStreamer

from citebench.data import Item
from citebench.metrics import quantiles
from citeformer import CiteGenerator, Policy, build_grammar
from citeformer.decoding.hf import SteeringLogitsProcessor
from citeformer.decoding.steering import RowSteering

Log = Callable[[str], None]


def timed_grammar_processor(gen: CiteGenerator, compiled: xgr.CompiledGrammar
                            ) -> SteeringLogitsProcessor:
    """citeformer's grammar mask alone (no quote guard, no lever) as ``generate`` runs it; its
    ``seconds`` time each call: accept the last token, fill and apply the mask."""
    row = RowSteering(gen.engine.vocab, matcher=xgr.GrammarMatcher(compiled))
    return SteeringLogitsProcessor(
        [row], vocab_size=gen.tokenizer_info.vocab_size, stop_token_ids=gen.stop_token_ids
    )


class TokenClock(BaseStreamer):
    """When each generated token leaves ``generate`` (the first ``put`` is the prompt)."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self._prompt_seen = False

    def put(self, value: torch.Tensor) -> None:
        if self._prompt_seen:
            self.times.extend([time.perf_counter()] * value.numel())
        self._prompt_seen = True

    def end(self) -> None:
        pass


def forced_generation(
    gen: CiteGenerator, prompt_ids: torch.Tensor, compiled: xgr.CompiledGrammar | None, tokens: int
) -> dict[str, Any]:
    """Greedy generation of exactly ``tokens`` tokens (end of sequence suppressed until then).

    The citation grammars never force an end, so the constrained run reaches ``tokens`` too.
    """
    processor = timed_grammar_processor(gen, compiled) if compiled is not None else None
    clock = TokenClock()
    started = time.perf_counter()
    with torch.inference_mode():
        output = gen.model.generate(
            input_ids=prompt_ids,
            attention_mask=torch.ones_like(prompt_ids),
            max_new_tokens=tokens,
            min_new_tokens=tokens,
            logits_processor=LogitsProcessorList([processor] if processor else []),
            eos_token_id=gen.stop_token_ids,
            pad_token_id=gen.pad_token_id,
            streamer=clock,
            do_sample=False, temperature=None, top_k=None, top_p=None,
        )
    finished = time.perf_counter()
    generated = output.shape[1] - prompt_ids.shape[1]
    if generated != tokens:
        raise RuntimeError(f"expected {tokens} generated tokens, got {generated}")
    return {
        "tokens": generated,
        "seconds": finished - started,
        "ttft_s": clock.times[0] - started,
        "decode_tps": (len(clock.times) - 1) / (clock.times[-1] - clock.times[0]),
        "end_to_end_tps": generated / (finished - started),
        "mask_s": processor.seconds if processor else [],
    }


def decode_rate(
    gen: CiteGenerator, item: Item, policies: Sequence[Policy], tokens: int, runs: int, log: Log
) -> dict[str, Any]:
    """Per policy: ``runs`` pairs of (unconstrained, constrained) runs on the same prompt,
    alternating which goes first; the ratio is taken per pair and over medians."""
    results = {}
    for policy in policies:
        prompt = gen.prompt(item.question, item.sources(), policy)
        prompt_ids = gen.tokenizer(prompt, add_special_tokens=False, return_tensors="pt").input_ids
        compiled = gen.compiled_grammar(len(item.passages), policy)
        forced_generation(gen, prompt_ids, compiled, 4)  # warm-up, not counted
        arms: dict[str, list[dict[str, Any]]] = {"unconstrained": [], "constrained": []}
        for run in range(runs):
            order = ("unconstrained", "constrained") if run % 2 == 0 else (
                "constrained", "unconstrained")
            for arm in order:
                sample = forced_generation(
                    gen, prompt_ids, compiled if arm == "constrained" else None, tokens
                )
                arms[arm].append(sample)
                log(f"decode {policy.value:<11} run {run + 1}/{runs} {arm:<13} "
                    f"{sample['decode_tps']:6.2f} tok/s decode, "
                    f"ttft {sample['ttft_s'] * 1e3:6.0f} ms")
        results[policy.value] = _summarize_arms(arms, prompt_ids.shape[1], tokens)
        _log_ratio(log, policy, results[policy.value])
    return results


def _summarize_arms(
    arms: dict[str, list[dict[str, Any]]], prompt_tokens: int, tokens: int
) -> dict[str, Any]:
    free, bound = arms["unconstrained"], arms["constrained"]
    summary: dict[str, Any] = {"prompt_tokens": prompt_tokens, "tokens_per_run": tokens}
    for key in ("decode_tps", "end_to_end_tps", "ttft_s"):
        summary[key] = {
            "unconstrained": quantiles([s[key] for s in free]),
            "constrained": quantiles([s[key] for s in bound]),
            "paired_ratio": quantiles([b[key] / f[key] for f, b in zip(free, bound, strict=True)]),
        }
        summary[key]["ratio_of_medians"] = (
            summary[key]["constrained"]["median"] / summary[key]["unconstrained"]["median"]
        )
    mask = [seconds for s in bound for seconds in s["mask_s"]]
    summary["mask_s"] = quantiles(mask)
    summary["samples"] = {arm: [{k: v for k, v in s.items() if k != "mask_s"} for s in runs]
                          for arm, runs in arms.items()}
    return summary


def _log_ratio(log: Log, policy: Policy, summary: dict[str, Any]) -> None:
    rate, mask = summary["decode_tps"], summary["mask_s"]
    log(f"decode {policy.value}: constrained/unconstrained = {rate['ratio_of_medians']:.3f} "
        f"(medians of {rate['constrained']['n']} runs), paired ratio median "
        f"{rate['paired_ratio']['median']:.3f} [{rate['paired_ratio']['min']:.3f}-"
        f"{rate['paired_ratio']['max']:.3f}]; mask median {mask['median'] * 1e3:.3f} ms, "
        f"p99 {mask['p99'] * 1e3:.3f} ms over {mask['n']} tokens")


def stream_ttft(gen: CiteGenerator, item: Item, runs: int, log: Log) -> dict[str, Any]:
    """Time from calling ``gen.stream`` to its first text chunk, with and without the grammar
    (REQUIRED policy, grammar already compiled and cached)."""
    samples: dict[str, list[float]] = {"unconstrained": [], "constrained": []}
    _first_chunk_seconds(gen, item, True)  # warm-up: compiles and caches the grammar
    for run in range(runs):
        order = (False, True) if run % 2 == 0 else (True, False)
        for constrained in order:
            seconds = _first_chunk_seconds(gen, item, constrained)
            samples["constrained" if constrained else "unconstrained"].append(seconds)
    summary = {arm: quantiles(values) for arm, values in samples.items()}
    log(f"stream ttft: unconstrained median {summary['unconstrained']['median'] * 1e3:.0f} ms, "
        f"constrained {summary['constrained']['median'] * 1e3:.0f} ms ({runs} runs each)")
    return summary


def _first_chunk_seconds(gen: CiteGenerator, item: Item, constrained: bool) -> float:
    started = time.perf_counter()
    stream = gen.stream(item.question, item.sources(), Policy.REQUIRED, max_new_tokens=6,
                        constrained=constrained)
    first: float | None = None
    for _ in stream:
        if first is None:
            first = time.perf_counter() - started
    return first if first is not None else time.perf_counter() - started


def compile_times(
    gen: CiteGenerator,
    plan: Sequence[tuple[int, Policy, int]],
    cached_runs: int,
    log: Log,
) -> list[dict[str, Any]]:
    """For each (N, policy, cold runs): cold = build_grammar + compile on a fresh compiler (empty
    cache); cached = the same call again on the last of those compilers (xgrammar's cache hit)."""
    rows = []
    for n, policy, runs in plan:
        cold: list[float] = []
        for _ in range(runs):
            compiler = xgr.GrammarCompiler(gen.tokenizer_info, cache_enabled=True)
            cold.append(_time_compile(compiler, n, policy))
        cached = [_time_compile(compiler, n, policy) for _ in range(cached_runs)]
        row = {"n_sources": n, "policy": policy.value, "cold_s": quantiles(cold),
               "cached_s": quantiles(cached), "grammar_chars": len(build_grammar(n, policy))}
        rows.append(row)
        log(f"compile N={n:<5} {policy.value:<11} cold median {row['cold_s']['median']:8.3f} s "
            f"[{row['cold_s']['min']:.3f}-{row['cold_s']['max']:.3f}] ({runs} runs), cached "
            f"{row['cached_s']['median'] * 1e6:.1f} us ({cached_runs} runs)")
    rows.append(_citeformer_cache_hit(gen, cached_runs))
    return rows


def _time_compile(compiler: xgr.GrammarCompiler, n: int, policy: Policy) -> float:
    started = time.perf_counter()
    compiler.compile_grammar(build_grammar(n, policy))
    return time.perf_counter() - started


def _citeformer_cache_hit(gen: CiteGenerator, runs: int) -> dict[str, Any]:
    gen.compiled_grammar(10, Policy.REQUIRED)
    seconds = []
    for _ in range(runs):
        started = time.perf_counter()
        gen.compiled_grammar(10, Policy.REQUIRED)
        seconds.append(time.perf_counter() - started)
    return {"n_sources": 10, "policy": "required", "citeformer_cache_hit_s": quantiles(seconds)}


_LOAD_SNIPPET = (
    "import json, time\n"
    "from citeformer.default_model import load_default\n"
    "started = time.perf_counter()\n"
    "load_default(progress=False)\n"
    "print(json.dumps({'load_s': time.perf_counter() - started}))\n"
)


def load_times(first_runs: int, cached_runs: int, log: Log) -> dict[str, Any]:
    """``load_default()`` in fresh processes: with an empty ``CITEFORMER_CACHE`` (de-quantizes the
    GGUF and writes the cache), then with that cache filled."""
    samples: dict[str, list[dict[str, float]]] = {"first": [], "cached": []}
    with tempfile.TemporaryDirectory(prefix="citeformer-bench-") as root:
        for run in range(first_runs):
            cache = os.path.join(root, f"cache-{run}")
            samples["first"].append(_load_in_subprocess(cache))
            log(f"load first  run {run + 1}/{first_runs}: {samples['first'][-1]['load_s']:.2f} s")
        for run in range(cached_runs):
            samples["cached"].append(_load_in_subprocess(cache))
            log(f"load cached run {run + 1}/{cached_runs}: {samples['cached'][-1]['load_s']:.2f} s")
    return {
        kind: {key: quantiles([s[key] for s in runs]) for key in ("load_s", "process_s")}
        for kind, runs in samples.items()
    }


def _load_in_subprocess(cache: str) -> dict[str, float]:
    env = {**os.environ, "CITEFORMER_CACHE": cache}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _LOAD_SNIPPET], env=env, check=True,
                          capture_output=True, text=True)
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    result["process_s"] = time.perf_counter() - started
    return result
