"""What citeformer's steering processor costs a real vLLM CPU server, and whom it stalls.

    python benchmarks/vllm_steering.py --checkout PATH --label LABEL [--skip-corner]

``--checkout``: the citeformer checkout installed (``pip install --no-deps``) into the vLLM venv
that ``tests/server/vllm_server.py`` builds and caches: a main checkout as "before", a branch as
"after". The server serves a stand-in model (a random-weight 2-layer Llama, hidden 64,
intermediate 128, 2 heads, with SmolLM2's real tokenizer, saved once under citeformer's cache)
with ``--logits-processors citeformer.vllm:SteeringProcessor``, on loopback, ``--max-model-len
8192`` (the 300-source prompt fits). Two measurements, merged under LABEL into
benchmarks/results/vllm_steering.json:

- ``per_token``: 32 requests at once (held-out technical questions, greedy, 64 new tokens, no
  seeds), steered and grammar-only (no payload, the whole grammar as structured output), the
  arms alternated ``--rounds`` times: vLLM's ``vllm:inter_token_latency_seconds`` (sum/count
  deltas of ``/metrics`` per arm), and the tokens per answer of each arm (the levers end the
  stand-in's answers sooner: compare per-token latency at those lengths).
- ``corner``: 8 steered requests streaming, then one request of 300 sources at the corner of
  the grammar bounds (``max_group=10``, the widest words and sentences) sent among them: the 8
  others' gaps between streamed chunks (client side), p50/p99/max, before it arrives and in
  the 6 s after.

Take the shared CPU lock while it runs: ``flock /tmp/cpu.lock python benchmarks/...``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parent / "core"), str(HERE)]

from citebench.data import load_dataset  # noqa: E402

from citeformer import Source, build_request  # noqa: E402
from citeformer.default_model import cache_dir, cache_folder, gguf_path  # noqa: E402
from citeformer.server._engines import prepare_call  # noqa: E402
from tests.server.vllm_server import (  # noqa: E402
    VllmServer,
    _python,
    ensure_vllm_venv,
    free_port,
    server_environment,
    vllm_cache_dir,
)

OUT = HERE / "results" / "vllm_steering.json"
MAX_MODEL_LEN = 8192
OTHER_TOKENS = 2000
"""Tokens each of the 8 requests decodes while the corner request arrives among them."""
CONCURRENT = 32
NEW_TOKENS = 64
CORNER_SOURCES = 300
CORNER_OPTIONS = {"max_group": 10, "max_word_chars": 128, "max_sentence_words": 1000}
WINDOW_S = 6.0


def stand_in() -> Path:
    """The stand-in model's folder, written once."""
    folder = Path(cache_dir(), "vllm-stand-in")
    if (folder / "config.json").is_file():
        return folder
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(cache_folder(gguf_path()))
    config = LlamaConfig.from_pretrained(cache_folder(gguf_path()))
    small = LlamaConfig(**{**config.to_dict(), "num_hidden_layers": 2, "hidden_size": 64,
                           "intermediate_size": 128, "num_attention_heads": 2,
                           "num_key_value_heads": 2, "head_dim": 32})
    torch.manual_seed(0)
    LlamaForCausalLM(small).eval().save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def install(venv: Path, checkout: Path) -> None:
    subprocess.run([str(_python(venv)), "-m", "pip", "install", "--disable-pip-version-check",
                    "-q", "--no-deps", "--force-reinstall", str(checkout)], check=True)


class Server(VllmServer):
    """The test suite's server, on the stand-in model with citeformer's processor only."""

    model: Path = Path()

    def start(self) -> None:
        command = [
            str(_python(self.venv)), "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(self.model), "--served-model-name", "stand-in",
            "--host", "127.0.0.1", "--port", str(self.port), "--dtype", "float32",
            "--max-model-len", str(MAX_MODEL_LEN), "--enforce-eager",
            "--distributed-executor-backend", "uni",
            "--logits-processors", "citeformer.vllm:SteeringProcessor",
        ]
        env = {**server_environment(), "PYTHONPATH": ""}  # citeformer as installed
        with self.log.open("ab") as sink:
            self.process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT,
                                            env=env, start_new_session=True)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited:\n{self.log_tail()}")
            try:
                if httpx.get(f"{self.url}/v1/models", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"the server was not ready:\n{self.log_tail()}")


def body(request: Any, *, steered: bool, stream: bool = False) -> dict[str, Any]:
    """The body ``ServerGenerator`` sends, every answer as long as ``max_tokens`` (vLLM's
    ``min_tokens`` holds the end back): per-token latency compared at equal lengths."""
    call = prepare_call(request, "vllm", "", model="stand-in", stream=stream, steered=steered)
    return {**call.body, "min_tokens": request.max_new_tokens}


def metric(text: str, name: str) -> float:
    found = re.search(rf"^{re.escape(name)}(?:{{[^}}]*}})? ([0-9.e+-]+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


async def batch(client: httpx.AsyncClient, url: str, bodies: list[dict[str, Any]]) -> list[int]:
    async def one(payload: dict[str, Any]) -> int:
        reply = await client.post(f"{url}/v1/chat/completions", json=payload, timeout=600)
        reply.raise_for_status()
        return int(reply.json()["usage"]["completion_tokens"])

    return list(await asyncio.gather(*(one(b) for b in bodies)))


async def per_token(url: str, rounds: int) -> dict[str, Any]:
    items = [i for i in load_dataset("technical") if i.split != "dev"]
    items = (items * (CONCURRENT // len(items) + 1))[:CONCURRENT]
    requests = [build_request(i.question, i.sources(), max_new_tokens=NEW_TOKENS) for i in items]
    arms: dict[str, dict[str, list[float]]] = {}
    async with httpx.AsyncClient() as client:
        await batch(client, url, [body(r, steered=True) for r in requests[:4]])  # warm up
        for _ in range(rounds):
            for arm, steered in (("steered", True), ("grammar_only", False)):
                before = (await client.get(f"{url}/metrics")).text
                tokens = await batch(client, url, [body(r, steered=steered) for r in requests])
                after = (await client.get(f"{url}/metrics")).text
                name = "vllm:inter_token_latency_seconds"
                seconds = metric(after, f"{name}_sum") - metric(before, f"{name}_sum")
                count = metric(after, f"{name}_count") - metric(before, f"{name}_count")
                got = arms.setdefault(arm, {"ms_per_token": [], "tokens_per_answer": []})
                got["ms_per_token"].append(round(1000 * seconds / count, 2))
                got["tokens_per_answer"].append(round(statistics.mean(tokens), 1))
    result: dict[str, Any] = {"requests": CONCURRENT, "max_tokens": NEW_TOKENS, **arms}
    result["ratio_median"] = round(statistics.median(arms["steered"]["ms_per_token"])
                                   / statistics.median(arms["grammar_only"]["ms_per_token"]), 3)
    return result


async def stream_gaps(client: httpx.AsyncClient, url: str, payload: dict[str, Any],
                      stamps: list[float]) -> None:
    async with client.stream("POST", f"{url}/v1/chat/completions", json=payload,
                             timeout=600) as reply:
        reply.raise_for_status()
        async for line in reply.aiter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                stamps.append(time.monotonic())


async def corner(url: str) -> dict[str, Any]:
    items = [i for i in load_dataset("technical") if i.split != "dev"][:8]
    # Long enough (every token forced, ``min_tokens``) that all 8 still decode through the window.
    others = [build_request(i.question, i.sources(), max_new_tokens=OTHER_TOKENS) for i in items]
    sources = [Source(f"mod{k}.sub{k} retries {k} times.") for k in range(CORNER_SOURCES)]
    big = build_request("How does mod1.sub1 handle retries?", sources, max_new_tokens=32,
                        **CORNER_OPTIONS)
    stamps: list[list[float]] = [[] for _ in others]
    async with httpx.AsyncClient() as client:
        tasks = [asyncio.create_task(stream_gaps(
            client, url, {**body(r, steered=True, stream=True), "stream": True}, s))
            for r, s in zip(others, stamps, strict=True)]
        await asyncio.sleep(4.0)
        arrived = time.monotonic()
        reply = await client.post(f"{url}/v1/chat/completions",
                                  json=body(big, steered=True), timeout=600)
        big_s = time.monotonic() - arrived
        await asyncio.gather(*tasks)
    gaps_before, gaps_after = [], []
    for series in stamps:
        for a, b in zip(series, series[1:], strict=False):
            if b <= arrived:
                gaps_before.append(b - a)
            elif a < arrived + WINDOW_S:
                gaps_after.append(b - a)
    streaming = sum(1 for series in stamps if series and series[-1] >= arrived + WINDOW_S)
    return {"others": len(others), "others_streaming_through_window": streaming,
            "corner_sources": CORNER_SOURCES, "options": CORNER_OPTIONS,
            "corner_status": reply.status_code, "corner_answer_s": round(big_s, 2),
            "before": _gaps(gaps_before), "after_arrival": _gaps(gaps_after),
            "window_s": WINDOW_S}


def _gaps(gaps: list[float]) -> dict[str, Any]:
    if not gaps:
        return {"n": 0}
    gaps = sorted(gaps)
    return {"n": len(gaps), "p50_ms": round(1000 * gaps[len(gaps) // 2], 1),
            "p99_ms": round(1000 * gaps[min(len(gaps) - 1, int(0.99 * len(gaps)))], 1),
            "max_ms": round(1000 * gaps[-1], 1)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkout", type=Path, required=True)
    parser.add_argument("--label", required=True)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--skip-corner", action="store_true")
    parser.add_argument("--skip-per-token", action="store_true")
    args = parser.parse_args(argv)
    venv = ensure_vllm_venv()
    install(venv, args.checkout.resolve())
    model = stand_in()
    vllm_cache_dir().mkdir(parents=True, exist_ok=True)
    log = Path(tempfile.mkstemp(prefix="vllm-steering-", suffix=".log")[1])
    server = Server(venv, free_port(), log)
    server.model = model
    server.start()
    result: dict[str, Any] = {"checkout": str(args.checkout), "server_log": str(log),
                              "max_model_len": MAX_MODEL_LEN}
    try:
        if not args.skip_per_token:
            result["per_token"] = asyncio.run(per_token(server.url, args.rounds))
            print(json.dumps(result["per_token"]), flush=True)
        if not args.skip_corner:
            result["corner"] = asyncio.run(corner(server.url))
            print(json.dumps(result["corner"]), flush=True)
    finally:
        server.stop()
    stored = json.loads(OUT.read_text()) if OUT.is_file() else {}
    stored.setdefault(args.label, {}).update(result)  # a section run alone keeps the other
    OUT.write_text(json.dumps(stored, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
