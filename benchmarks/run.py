"""Run every citeformer benchmark in one process and regenerate the results.

    python benchmarks/run.py            # full run (about 15 minutes on 2 idle CPU cores)
    python benchmarks/run.py --quick    # smoke run on 3 questions, results in results/quick/
    python benchmarks/run.py --only speed compile   # rerun sections; the README keeps the rest
    python benchmarks/run.py --rescore  # recompute quality metrics from stored answers, no model
    python benchmarks/run.py --only quality --dataset technical --max-new-tokens 160

Sections: ``load`` (embedded model load, first and cached), ``compile`` (grammar compile, cold and
cached), ``speed`` (decode tokens/s with and without the grammar, time to first token, mask time)
and ``quality`` (the systems on each labeled set, or one split of it, normal and adversarial
prompts). Each writes ``results/<section>.json``, the quality section one file per set
(``quality.json`` for the encyclopedic set, ``quality_technical.json`` for the technical one);
then the plots and the results section of ``README.md`` are rebuilt from all result files present
(``--results-dir`` writes both elsewhere).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, fields, replace
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import torch  # noqa: E402
from citebench import quality, quotes, report, speed  # noqa: E402
from citebench.data import (  # noqa: E402
    ATTACKS,
    SPLITS,
    Item,
    adversarial_items,
    attacked,
    load_dataset,
    load_items,
)
from citebench.systems import SYSTEMS, System  # noqa: E402

from citeformer import CiteGenerator, Policy  # noqa: E402

SECTIONS = ("load", "compile", "speed", "quotes", "quality")


@dataclass(frozen=True)
class Settings:
    questions: int | None
    """Questions of each labeled set answered by every system (None: all)."""
    adversarial_questions: int
    """Questions of each set answered once per attack (2 attacks) by every system."""
    max_new_tokens: int
    decode_tokens: int
    """Exactly this many tokens per speed run."""
    decode_runs: int
    ttft_runs: int
    compile_ns: tuple[int, ...]
    compile_runs: int
    compile_big_n: int | None
    """Compiled for the REQUIRED policy only, once: cold compile time grows faster than N."""
    cached_compile_runs: int
    load_first_runs: int
    load_cached_runs: int
    quote_runs: int
    """Cold and cached builds of the verbatim quote index per passage shape."""
    split: str = "all"
    """Questions of this split of the labeled set only (``dev``, ``test`` or ``all``)."""
    systems: tuple[str, ...] | None = None
    """Names of the quality systems to run (None: all)."""
    datasets: tuple[str, ...] = tuple(report.QUALITY_FILES)
    """The question sets the quality section runs on, one result file each (the api set is
    measured by readability.py and refusal_signals.py)."""


FULL = Settings(
    questions=None, adversarial_questions=12, max_new_tokens=64, decode_tokens=48,
    decode_runs=5, ttft_runs=5, compile_ns=(1, 10, 100), compile_runs=3, compile_big_n=1000,
    cached_compile_runs=5, load_first_runs=1, load_cached_runs=3, quote_runs=5,
)
QUICK = Settings(
    questions=3, adversarial_questions=1, max_new_tokens=24, decode_tokens=8, decode_runs=2,
    ttft_runs=2, compile_ns=(1, 10), compile_runs=1, compile_big_n=None, cached_compile_runs=2,
    load_first_runs=1, load_cached_runs=1, quote_runs=1,
)


def log(message: str) -> None:
    print(message, flush=True)


def run_load(gen: CiteGenerator, settings: Settings) -> dict[str, Any]:
    return speed.load_times(settings.load_first_runs, settings.load_cached_runs, log)


def run_compile(gen: CiteGenerator, settings: Settings) -> dict[str, Any]:
    plan = [(n, policy, settings.compile_runs) for n in settings.compile_ns for policy in Policy]
    if settings.compile_big_n:
        plan.append((settings.compile_big_n, Policy.REQUIRED, 1))
    return {"rows": speed.compile_times(gen, plan, settings.cached_compile_runs, log)}


def run_quotes(gen: CiteGenerator, settings: Settings) -> dict[str, Any]:
    return quotes.run(gen, [(5, 1000), (3, 3000)], settings.quote_runs, log)


def run_speed(gen: CiteGenerator, settings: Settings) -> dict[str, Any]:
    item = load_items()[0]
    return {
        "item": item.id,
        "decode": speed.decode_rate(
            gen, item, list(Policy), settings.decode_tokens, settings.decode_runs, log
        ),
        "stream_ttft": speed.stream_ttft(gen, item, settings.ttft_runs, log),
    }


def chosen_systems(settings: Settings) -> tuple[System, ...]:
    names = settings.systems
    return tuple(s for s in SYSTEMS if names is None or s.name in names)


def split_items(settings: Settings, dataset: str = "encyclopedic") -> list[Item]:
    items = load_dataset(dataset)
    return items if settings.split == "all" else [i for i in items if i.split == settings.split]


def run_quality(
    gen: CiteGenerator, settings: Settings, dataset: str = "encyclopedic"
) -> dict[str, Any]:
    items = split_items(settings, dataset)
    systems = chosen_systems(settings)
    normal = items[: settings.questions] if settings.questions else items
    attacked = adversarial_items(items, settings.adversarial_questions)
    prompt_sets = {"normal": normal, "adversarial": attacked}
    records: dict[str, list[dict[str, Any]]] = {}
    summary = {}
    for name, prompt_items in prompt_sets.items():
        log(f"quality ({dataset}): {name} prompts, {len(prompt_items)} x {len(systems)} "
            "systems")
        records[name] = quality.run_items(gen, systems, prompt_items, settings.max_new_tokens, log)
        summary[name] = quality.summarize_by_system(records[name], systems)
        for system, row in summary[name].items():
            figures = ", ".join(f"{key} {report.pct(row[key])}" for key in (
                "fabrication_rate", "precision", "coverage", "correctness", "degenerate",
                "cut_off", "repetition", "after_punctuation", "after_dangling_word",
                "long_sentences"))
            figures += f", unsupported numbers {row['unsupported_numbers']}"
            cost = row["evidence_ms_per_marker"]
            if cost.get("n"):
                figures += f", evidence scoring {report.spread(cost)} ms per marker"
            log(f"  {name:<11} {system:<22} {figures}")
    return {
        "dataset": dataset,
        "counts": {name: len(prompt_items) for name, prompt_items in prompt_sets.items()},
        "split": settings.split,
        "max_new_tokens": settings.max_new_tokens,
        "summary": summary,
        "records": records,
    }


def rescore_quality(results_dir: Path) -> None:
    """Recompute every quality measurement from the answers stored in the quality files."""
    for dataset, name in report.QUALITY_FILES.items():
        path = results_dir / f"{name}.json"
        if not path.is_file():
            continue
        payload = json.loads(path.read_text(encoding="utf-8"))
        items = load_dataset(dataset)
        variants = items + [attacked(item, attack) for item in items for attack in ATTACKS]
        for prompts, records in payload["records"].items():
            present = {r["system"] for r in records}
            systems = [s for s in SYSTEMS if s.name in present]
            payload["records"][prompts] = quality.rescore(records, variants)
            payload["summary"][prompts] = quality.summarize_by_system(
                payload["records"][prompts], systems
            )
        report.write_json(path, payload)


RUNNERS: dict[str, Callable[[CiteGenerator, Settings], dict[str, Any]]] = {
    "load": run_load, "compile": run_compile, "speed": run_speed, "quotes": run_quotes,
}


def run_section(
    section: str, gen: CiteGenerator, settings: Settings
) -> Iterator[tuple[str, dict[str, Any]]]:
    """The result files of one section as they are done, (name, payload): one per question set
    for ``quality``, so a failure on the second set keeps the first."""
    if section != "quality":
        yield section, RUNNERS[section](gen, settings)
        return
    for dataset in settings.datasets:
        yield report.QUALITY_FILES[dataset], run_quality(gen, settings, dataset)


def budget(settings: Settings) -> str:
    """The planned work, printed before the run."""
    answers = 0
    for dataset in settings.datasets:
        normal = len(split_items(settings, dataset))
        if settings.questions:
            normal = min(normal, settings.questions)
        answers += (normal + 2 * settings.adversarial_questions) * len(chosen_systems(settings))
    speed_tokens = 2 * len(Policy) * settings.decode_runs * settings.decode_tokens
    return (f"plan: {answers} answers x <= {settings.max_new_tokens} tokens "
            f"(<= {answers * settings.max_new_tokens} tokens), speed runs {speed_tokens} tokens, "
            f"compile N={settings.compile_ns} x {len(Policy)} policies x {settings.compile_runs} "
            f"+ N={settings.compile_big_n} x 1, load {settings.load_first_runs} first + "
            f"{settings.load_cached_runs} cached")


def machine() -> str:
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return (f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs, torch threads "
            f"{torch.get_num_threads()}, load average at end {load}")


def versions() -> str:
    packages = ("torch", "transformers", "xgrammar", "llama-index-core", "citeformer")
    return f"python {platform.python_version()}, " + ", ".join(
        f"{name} {metadata.version(name)}" for name in packages
    )


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke run on 3 questions")
    parser.add_argument("--only", nargs="+", choices=SECTIONS, default=list(SECTIONS),
                        help="run only these sections (the others' result files are kept)")
    parser.add_argument("--rescore", action="store_true",
                        help="recompute quality metrics from stored answers and rebuild the report")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads (default: torch's own choice)")
    parser.add_argument("--split", choices=("all", *SPLITS), default="all",
                        help="quality on this split of the labeled sets only (default: all); "
                             "dev is for tuning, test is held out")
    parser.add_argument("--dataset", choices=(*report.QUALITY_FILES, "both"), default="both",
                        help="the question set(s) of the quality section (default: both); "
                             "each writes its own result file")
    parser.add_argument("--max-new-tokens", type=positive_int, default=None, metavar="N",
                        help="answer length bound of the quality section (default: 64, "
                             "--quick 24); the same as --set max_new_tokens=N")
    parser.add_argument("--results-dir", type=Path, default=None, metavar="DIR",
                        help="write the result files and a README with their tables to DIR "
                             "instead of results/ and this folder's README.md")
    parser.add_argument("--systems", nargs="+", choices=[s.name for s in SYSTEMS], default=None,
                        help="quality systems to run (default: all)")
    parser.add_argument("--set", nargs="+", default=[], metavar="FIELD=INT", dest="overrides",
                        help="override a setting, e.g. --set questions=20 max_new_tokens=48 "
                             f"(fields: {', '.join(f.name for f in fields(Settings))})")
    return parser.parse_args(argv)


def with_overrides(settings: Settings, overrides: list[str]) -> Settings:
    """Integer settings from ``FIELD=VALUE`` strings (``compile_ns`` takes ``1,10,100``)."""
    changes: dict[str, Any] = {}
    for override in overrides:
        name, _, value = override.partition("=")
        if name not in {f.name for f in fields(Settings)}:
            raise SystemExit(f"unknown setting {name!r}")
        changes[name] = tuple(int(v) for v in value.split(",")) if name == "compile_ns" else (
            int(value) if value.lower() != "none" else None)
    return replace(settings, **changes)


def settings_of(args: argparse.Namespace) -> Settings:
    """The run's settings: the preset, then ``--set``, then the dedicated flags."""
    settings = with_overrides(QUICK if args.quick else FULL, args.overrides)
    settings = replace(settings, split=args.split,
                       systems=tuple(args.systems) if args.systems else None,
                       datasets=tuple(report.QUALITY_FILES) if args.dataset == "both"
                       else (args.dataset,))
    if args.max_new_tokens is not None:
        settings = replace(settings, max_new_tokens=args.max_new_tokens)
    return settings


def output_paths(args: argparse.Namespace) -> tuple[Path, Path]:
    """Where the result files go and which README gets their tables."""
    if args.results_dir is not None:
        return args.results_dir, args.results_dir / "README.md"
    if args.quick:
        return HERE / "results" / "quick", HERE / "results" / "quick" / "README.md"
    return HERE / "results", HERE / "README.md"


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    settings = settings_of(args)
    results_dir, readme = output_paths(args)
    if args.rescore:
        rescore_quality(results_dir)
        report.regenerate(results_dir, readme)
        return
    if args.threads:
        torch.set_num_threads(args.threads)
        os.environ["OMP_NUM_THREADS"] = str(args.threads)  # for the load subprocesses
    log(budget(settings))
    started = time.perf_counter()
    gen = CiteGenerator.default(progress=False)
    section_seconds = {}
    for section in (s for s in SECTIONS if s in args.only):
        log(f"== {section}")
        section_started = time.perf_counter()
        for name, payload in run_section(section, gen, settings):
            report.write_json(results_dir / f"{name}.json", payload)
            section_seconds[name] = time.perf_counter() - section_started
            log(f"== {name} done in {section_seconds[name]:.0f} s")
            section_started = time.perf_counter()
    report.write_json(results_dir / "run.json", {
        "finished": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "wall_seconds": time.perf_counter() - started,
        "section_seconds": section_seconds,
        "sections": args.only,
        "settings": asdict(settings),
        "machine": machine(),
        "versions": versions(),
    })
    report.regenerate(results_dir, readme)
    minutes = (time.perf_counter() - started) / 60
    log(f"wrote {results_dir} and {readme}; wall time {minutes:.1f} min")


if __name__ == "__main__":
    main()
