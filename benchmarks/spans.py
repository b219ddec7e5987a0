"""How well the located evidence spans hold the answer, re-measured on stored benchmark answers.

    python benchmarks/spans.py            # writes benchmarks/results/spans.json
    python benchmarks/spans.py --answers quality.json --out spans_quality.json

No generation: the answers are those a benchmark run stored (``results/readability_test.json``
if present, else ``readability_dev.json``, else ``quality.json``, every arm or system, each
distinct answer text once; the ``unconstrained`` arm left out). Each answer's markers are parsed
(``citeformer.parse_citations``) and their spans located again
(``citeformer.evidence.spans.with_evidence``) against the item's passages.
Per question set it reports:

- ``gold_span_has_answer``: of the citations whose marker names a gold passage, the share whose
  span contains the gold answer string (case-insensitive); ``gold_passage_has_answer`` is the
  same share for the whole passage, the most a span can reach;
- ``ms_per_citation``: the lexical cost, median and p99 over answers of (time to locate every
  span of the answer, caches cleared first) / (its citations);
- ``scores``: quantiles of the span score for gold and non-gold citations and the share of each
  flagged weak at ``WEAK_SUPPORT`` and at neighbouring thresholds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from citebench.data import Item, load_dataset  # noqa: E402

from citeformer import parse_citations  # noqa: E402
from citeformer.evidence import spans as spans_module  # noqa: E402
from citeformer.evidence.spans import WEAK_SUPPORT, with_evidence  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
INPUTS = ("readability_test.json", "readability_dev.json", "quality.json")
THRESHOLDS = (0.25, 0.3, WEAK_SUPPORT, 0.4, 0.5)
DATASETS = {"q": "encyclopedic", "t": "technical", "a": "api"}
"""Question id prefix -> question set (``q01`` is encyclopedic, ``t01`` technical)."""


def stored_answers(
    results: Path = RESULTS, names: Sequence[str] = INPUTS
) -> tuple[str, list[tuple[str, str, str]]]:
    """The first of ``names`` stored, and its distinct (set, item id, text) answers."""
    for name in names:
        path = results / name
        if path.exists():
            data = json.loads(path.read_text(encoding="utf-8"))
            found = dict.fromkeys(
                (DATASETS[r["item"][0]], r["item"], r["text"])
                for r in _records(data)
                if r.get("text") and r.get("attack", "none") == "none" and not r.get("error")
            )
            return name, list(found)
    raise SystemExit(f"no stored answers in {results}: run benchmarks/run.py or readability.py")


def _records(data: dict[str, Any]) -> Iterator[dict[str, Any]]:
    # readability_*.json: sets -> arm -> records; quality.json: records -> group -> list. The
    # unconstrained arm is the model without citeformer's grammar: its markers may name sources
    # that do not exist, and its answers are not citeformer's.
    if "sets" in data:
        for arms in data["sets"].values():
            for name, arm in arms.items():
                if name != "unconstrained":
                    yield from arm.get("records", [])
    else:
        for group in data.get("records", {}).values():
            yield from group


def quantiles(values: Sequence[float]) -> dict[str, float] | None:
    """p10, p25, median, p75, p90 of ``values`` (``None`` when there are fewer than two)."""
    if len(values) < 2:
        return None
    cuts = statistics.quantiles(values, n=20, method="inclusive")
    picks = {"p10": cuts[1], "p25": cuts[4], "median": cuts[9], "p75": cuts[14], "p90": cuts[17]}
    return {key: round(value, 3) for key, value in picks.items()}


def measure(answers: list[tuple[str, str, str]], items: dict[str, Item]) -> dict[str, Any]:
    """The measures of one question set's answers (see the module docstring)."""
    gold_scores: list[float] = []
    other_scores: list[float] = []
    span_hits = passage_hits = 0
    costs: list[float] = []
    for _, item_id, text in answers:
        item = items[item_id]
        sources = item.sources()
        citations = parse_citations(text, len(sources))
        if not citations:
            continue
        # Cold caches: the cost a fresh answer pays, not a re-read of the same passages.
        spans_module.sentence_spans.cache_clear()
        spans_module._sentence_words.cache_clear()
        started = time.perf_counter()
        located = with_evidence(text, citations, sources, item.question)
        costs.append((time.perf_counter() - started) * 1000 / len(located))
        gold = item.gold_numbers()
        wanted = item.answer.casefold()
        for citation in located:
            span = citation.evidence
            score = span.score if span is not None else 0.0
            if citation.source_id in gold:
                gold_scores.append(score)
                span_hits += span is not None and wanted in span.text.casefold()
                passage_hits += wanted in sources[citation.source_id - 1].text.casefold()
            else:
                other_scores.append(score)
    n_gold = len(gold_scores)
    return {
        "answers": len(costs),
        "citations": n_gold + len(other_scores),
        "gold_citations": n_gold,
        "gold_span_has_answer": _share(span_hits, n_gold),
        "gold_passage_has_answer": _share(passage_hits, n_gold),
        "ms_per_citation": {
            "median": round(statistics.median(costs), 4) if costs else None,
            "p99": round(_percentile(costs, 0.99), 4) if costs else None,
        },
        "scores": {
            "gold": quantiles(gold_scores),
            "non_gold": quantiles(other_scores),
            "weak_share": {
                str(t): {
                    "gold": _share(sum(s < t for s in gold_scores), n_gold),
                    "non_gold": _share(sum(s < t for s in other_scores), len(other_scores)),
                }
                for t in THRESHOLDS
            },
        },
    }


def _share(k: int, n: int) -> dict[str, Any]:
    return {"value": round(k / n, 4) if n else None, "k": k, "n": n}


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--answers", help="a result file of benchmarks/results to read")
    parser.add_argument("--out", default="spans.json", help="file written in benchmarks/results")
    args = parser.parse_args()
    source, answers = stored_answers(names=[args.answers] if args.answers else INPUTS)
    report: dict[str, Any] = {"answers_from": f"results/{source}", "weak_support": WEAK_SUPPORT,
                              "sets": {}}
    for name in sorted({dataset for dataset, _, _ in answers}):
        items = {item.id: item for item in load_dataset(name)}
        result = measure([a for a in answers if a[0] == name], items)
        report["sets"][name] = result
        span, passage = result["gold_span_has_answer"], result["gold_passage_has_answer"]
        weak = result["scores"]["weak_share"][str(WEAK_SUPPORT)]
        print(f"{name}: {result['answers']} answers, {result['citations']} citations "
              f"({result['gold_citations']} of a gold passage)")
        print(f"  span holds the gold answer: {span['value']} ({span['k']}/{span['n']}); "
              f"passage does: {passage['value']} ({passage['k']}/{passage['n']})")
        print(f"  ms per citation: median {result['ms_per_citation']['median']}, "
              f"p99 {result['ms_per_citation']['p99']}")
        print(f"  score gold {result['scores']['gold']}")
        print(f"  score non-gold {result['scores']['non_gold']}")
        print(f"  weak at {WEAK_SUPPORT}: gold {weak['gold']['value']}, "
              f"non-gold {weak['non_gold']['value']}")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / args.out).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {RESULTS / args.out}")


if __name__ == "__main__":
    main()
