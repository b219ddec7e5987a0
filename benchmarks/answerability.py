"""The answerability reader beside every refusal measure studied, on held-out questions.

    python benchmarks/answerability.py

For every question of the four labeled sets and its unanswerable twin
(``citebench.data.unanswerable``), each measure scores how well the sources answer it: the
studied ones of ``refusal_signals.py`` (``lexical``, ``lexical_sentence``, ``embedding``,
``lexical_key``, ``lexical_ident``, ``lexical_embedding``, ``key_ident_embedding``) and
``reader`` (``answerability_reader.reader_support``: the answerability reader, with the head
kept in ``results/answerability_head.json`` or ``--weights``). Per measure:

- one threshold for every set, chosen on the union of the dev splits of the three sets
  encyclopedic, technical and api (67 answerable questions): the highest that refuses at most
  5% of them (3);
- per set, on its test split: the AUC (an answerable question outscoring an unanswerable twin),
  and the share of unanswerable twins refused and of answerable questions refused (false
  refusals) at that threshold. ``paraphrase`` is measured too, though its dev split chooses
  nothing (as in ``refusal_signals.py``'s shared thresholds).

Then the reader's latency per question, one thread: the whole ``reader_support`` and, beside it,
``embedding_support`` (the same MiniLM pass without the reader), over the test questions of the
three sets, after a warm-up. Results go to ``benchmarks/results/answerability.json`` (``--out``);
``--calibrate`` writes the reader's threshold into its head file.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import answerability_reader as answerability  # noqa: E402
from citebench.data import DATASETS, Item, load_dataset, unanswerable  # noqa: E402
from refusal_signals import (  # noqa: E402
    CANDIDATES,
    auc,
    embedding,
    lexical,
    lexical_sentence,
)

from citeformer.evidence.refusal import embedding_support, question_words  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
CALIBRATION_SETS = ("encyclopedic", "technical", "api")
MAX_FALSE_REFUSALS = 0.05


FEATURE_CACHE = Path(__file__).resolve().parent / "data" / "answerability_eval_features.pkl"
_features: dict[tuple[str, tuple[str, ...]], list[list[float]]] = {}
_head: list[answerability.Reader] = []  # the head measured, set by main()


def reader(item: Item) -> float:
    """``reader_support``, its features cached on disk: heads are compared without MiniLM."""
    if not question_words(item.question):
        return 1.0
    key = (item.question, tuple(f"{s.title}\x00{s.text}" for s in item.sources()))
    if key not in _features:
        _features[key] = answerability.source_features(item.question, item.sources())
    return float(_head[0].probability(_features[key]).max())


MEASURES = {"lexical": lexical, "lexical_sentence": lexical_sentence, "embedding": embedding,
            **CANDIDATES, "reader": reader}


def shared_threshold(scores: list[float]) -> float:
    """The highest threshold below which at most MAX_FALSE_REFUSALS of ``scores`` fall.

    Written with four significant digits, rounded down, so that the number a reader sees is the
    one measured (the reader's probabilities are small: 0.0005506, not 0.0006).
    """
    ordered = sorted(scores)
    threshold = ordered[math.floor(MAX_FALSE_REFUSALS * len(ordered))]
    if threshold <= 0:
        return threshold
    step = 10.0 ** (math.floor(math.log10(threshold)) - 3)
    return float(f"{math.floor(threshold / step + 1e-9) * step:.4g}")


def latency(items: list[Item]) -> dict[str, float]:
    """Milliseconds per question of ``reader_support`` and ``embedding_support``."""
    timings: dict[str, list[float]] = {"reader": [], "embedding": []}
    for item in items[:3]:  # warm-up
        answerability.reader_support(item.question, item.sources(), _head[0])
        embedding_support(item.question, item.sources())
    for item in items:
        for name, measure in (("reader", functools.partial(answerability.reader_support,
                                                            reader=_head[0])),
                              ("embedding", embedding_support)):
            started = time.perf_counter()
            measure(item.question, item.sources())
            timings[name].append(1000 * (time.perf_counter() - started))
    report = {}
    for name, values in timings.items():
        values.sort()
        report[f"{name}_ms_median"] = round(statistics.median(values), 1)
        report[f"{name}_ms_p90"] = round(values[int(0.9 * (len(values) - 1))], 1)
    report["added_ms_median"] = round(report["reader_ms_median"] - report["embedding_ms_median"], 1)
    report["questions"] = len(items)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--weights", type=Path, default=None,
                        help="a head's weights file instead of the shipped one")
    parser.add_argument("--measures", nargs="+", choices=list(MEASURES), default=list(MEASURES))
    parser.add_argument("--no-latency", action="store_true")
    parser.add_argument("--calibrate", action="store_true",
                        help="write the reader's threshold into the shipped weights file")
    parser.add_argument("--out", default="answerability.json",
                        help="file name under benchmarks/results")
    args = parser.parse_args()
    import pickle

    import torch

    torch.set_num_threads(1)
    head_file = args.weights or answerability.HEAD
    head = answerability.load_reader(head_file)
    _head.append(head)
    started = time.perf_counter()
    stamp = ",".join(answerability.FEATURES)
    if FEATURE_CACHE.exists():
        cached = pickle.loads(FEATURE_CACHE.read_bytes())
        if cached.get("features") == stamp:
            _features.update(cached["pairs"])
    rows: dict[str, list[dict[str, Any]]] = {}
    for name in DATASETS:
        items = load_dataset(name)
        rows[name] = [
            {"id": item.id, "split": item.split, "kind": kind,
             **{measure: MEASURES[measure](item) for measure in args.measures}}
            for kind, group in (("answerable", items), ("unanswerable", unanswerable(items)))
            for item in group
        ]
    FEATURE_CACHE.write_bytes(pickle.dumps({"features": stamp, "pairs": _features}))
    table: dict[str, Any] = {}
    for measure in args.measures:
        dev = [r[measure] for name in CALIBRATION_SETS for r in rows[name]
               if r["split"] == "dev" and r["kind"] == "answerable"]
        threshold = shared_threshold(dev)
        cells = {}
        for name, group in rows.items():
            test = {kind: [r[measure] for r in group
                           if r["split"] == "test" and r["kind"] == kind]
                    for kind in ("answerable", "unanswerable")}
            cells[name] = {
                "auc_test": round(auc(test["answerable"], test["unanswerable"]), 3),
                "refused_unanswerable": round(
                    sum(s < threshold for s in test["unanswerable"]) / len(test["unanswerable"]),
                    3),
                "refused_answerable": round(
                    sum(s < threshold for s in test["answerable"]) / len(test["answerable"]), 3),
                "n_test": [len(test["answerable"]), len(test["unanswerable"])],
            }
        dev_auc = {
            name: round(auc(
                [r[measure] for r in rows[name]
                 if r["split"] == "dev" and r["kind"] == "answerable"],
                [r[measure] for r in rows[name]
                 if r["split"] == "dev" and r["kind"] == "unanswerable"]), 3)
            for name in rows}
        table[measure] = {"threshold": threshold, "sets": cells, "auc_dev": dev_auc}
    if args.calibrate and "reader" in table:
        kept = json.loads(head_file.read_text(encoding="utf-8"))
        kept["threshold"] = table["reader"]["threshold"]
        head_file.write_text(json.dumps(kept) + "\n", encoding="utf-8")
        print(f"threshold {kept['threshold']} written to {head_file}")
    report: dict[str, Any] = {
        "calibration": f"one threshold per measure: the highest refusing at most "
                       f"{MAX_FALSE_REFUSALS:.0%} of the answerable dev questions of "
                       f"{', '.join(CALIBRATION_SETS)} together",
        "reader": head.info.get("trained"),
        "table": table, "rows": rows,
    }
    print("measure, threshold; per set: test AUC, refused unanswerable / answerable (test);"
          " dev AUC")
    for measure, row in table.items():
        print(f"  {measure:20} < {row['threshold']:<9.4g} " + "  ".join(
            f"{name} {c['auc_test']:.3f} {c['refused_unanswerable']:.2f}/"
            f"{c['refused_answerable']:.2f}" for name, c in row["sets"].items())
            + "  dev " + " ".join(f"{v:.3f}" for v in row["auc_dev"].values()))
    if not args.no_latency and "reader" in args.measures:
        test_items = [item for name in CALIBRATION_SETS for item in load_dataset(name)
                      if item.split == "test"]
        report["latency"] = latency(test_items)
        print("latency per question, one thread:", report["latency"])
    report["seconds"] = round(time.perf_counter() - started, 1)
    out = RESULTS / args.out
    out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(f"{report['seconds']} s; written to {out}")


if __name__ == "__main__":
    main()
