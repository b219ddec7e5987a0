"""What the pinned llama.cpp build flags cost: builds of llama-cpp-python side by side, one run.

    python benchmarks/llama_cpp_build.py portable=~/.cache/citeformer/llama-cpp-wheels/0.3.36-*/ \\
        native=/tmp/llama-native/

Each NAME=FOLDER holds one llama-cpp-python wheel (``make test`` builds the portable one into
citeformer's cache; build another with ``CMAKE_ARGS="" pip wheel --no-deps --no-binary
llama-cpp-python llama-cpp-python==0.3.36 -w FOLDER`` for llama.cpp's default, ``-march=native``).
Every wheel is installed into a folder of its own and measured in a child process, so a build
that crashes is an exit status in the table, not the end of the run. Per build, with the
embedded Q4_1 model, greedy, ``--threads`` threads, the best of ``--repeats`` runs:

- decode: a one-token prompt, then 64 new tokens (tokens/s; the one case a build that crashes on
  matrix work still runs);
- RAG prompt: a chat prompt of about 560 tokens (the README's question over six passages), then
  64 new tokens (prefill tokens/s, decode tokens/s).

Results go to ``benchmarks/results/llama_cpp_build.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results" / "llama_cpp_build.json"

_CHILD = r"""
import json, sys, time
import llama_cpp
from citeformer import Source
from citeformer.default_model import gguf_path
from citeformer.prompt import build_messages

threads, repeats, case = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
llama = llama_cpp.Llama(str(gguf_path()), n_ctx=2048, n_threads=threads, n_threads_batch=threads,
                        verbose=False)
features = llama_cpp.llama_print_system_info().decode().strip()
if case == "decode":
    prompt = [llama.token_bos()] if llama.token_bos() >= 0 else llama.tokenize(b"Hello")[:1]
else:
    passages = [
        "The Eiffel Tower was completed on 31 March 1889 for the World's Fair in Paris. "
        "It was designed by Gustave Eiffel's engineering company and is 330 metres tall. " * 2,
        "Honey bees communicate the location of flowers through a waggle dance. A colony "
        "holds tens of thousands of workers, a queen and some hundreds of drones. " * 2,
        "The Great Wall of China was built over many centuries; the best-known parts date "
        "from the Ming dynasty, between 1368 and 1644, and run for thousands of kilometres. " * 2,
        "Mount Everest, on the border of Nepal and China, is 8,849 metres high. It was first "
        "climbed by Edmund Hillary and Tenzing Norgay on 29 May 1953. " * 2,
        "Photosynthesis turns light, water and carbon dioxide into glucose and oxygen in "
        "the chloroplasts of plant cells, using the pigment chlorophyll. " * 2,
        "The Apollo 11 mission landed the first people on the Moon on 20 July 1969: Neil "
        "Armstrong and Buzz Aldrin walked on the surface while Michael Collins orbited. " * 2,
    ]
    sources = [Source(text) for text in passages]
    messages = build_messages("When was the Eiffel Tower completed?", sources, "required")
    text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    prompt = llama.tokenize((text + "<|im_start|>assistant\n").encode(), special=True)
best = None
for _ in range(repeats):
    llama.reset()
    started = time.perf_counter()
    llama.eval(prompt)
    prefilled = time.perf_counter()
    token, generated = None, 0
    for _ in range(64):
        token = llama.sample(temp=0.0)
        llama.eval([token])
        generated += 1
    ended = time.perf_counter()
    run = {"prompt_tokens": len(prompt), "prefill_s": prefilled - started,
           "decode_tokens": generated, "decode_s": ended - prefilled}
    if best is None or run["decode_s"] + run["prefill_s"] < best["decode_s"] + best["prefill_s"]:
        best = run
best["features"] = features
print(json.dumps(best))
"""


def install(wheel_folder: Path, target: Path) -> None:
    (wheel,) = wheel_folder.expanduser().glob("llama_cpp_python-*.whl")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target",
         str(target), str(wheel)],
        check=True,
    )


def measure(target: Path, case: str, threads: int, repeats: int) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-X", "faulthandler", "-c", _CHILD, str(threads), str(repeats), case],
        capture_output=True, text=True, check=False, timeout=900,
        env={**os.environ, "PYTHONPATH": str(target), "OMP_NUM_THREADS": str(threads)},
    )
    if done.returncode != 0:
        return {"exit": done.returncode, "stderr": done.stderr[-600:]}
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("builds", nargs="+", help="NAME=FOLDER holding a wheel")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    results: dict[str, Any] = {"threads": args.threads, "repeats": args.repeats, "builds": {}}
    with tempfile.TemporaryDirectory() as scratch:
        for spec in args.builds:
            name, _, folder = spec.partition("=")
            target = Path(scratch, name)
            install(Path(folder), target)
            row = results["builds"][name] = {
                case: measure(target, case, args.threads, args.repeats)
                for case in ("decode", "rag")
            }
            print(name, _summary(row), flush=True)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=1))
    print(f"wrote {RESULTS}")


def _summary(row: dict[str, Any]) -> str:
    parts = []
    for case, run in row.items():
        if "exit" in run:
            parts.append(f"{case}: crashed (exit {run['exit']})")
            continue
        rate = run["decode_tokens"] / run["decode_s"]
        part = f"{case}: decode {rate:.1f} tok/s"
        if case == "rag":
            part += f", prefill {run['prompt_tokens'] / run['prefill_s']:.0f} tok/s"
        parts.append(part)
    return "; ".join(parts)


if __name__ == "__main__":
    main()
