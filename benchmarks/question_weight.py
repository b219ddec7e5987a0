"""The question's weight in lexical evidence, set per claim, read on stored answers.

``LexicalEvidence`` scores a source by (claim share + q x question share) / (1 + q), q = 2: the
question says which passage a short claim is about. Where the question is put in other words than
its passage (the ``paraphrase`` set), its words lead to the distractors instead. Each rule here
sets q per claim from what can be read without the gold labels, and the source it ranks first
for each marker's claim of stored answers (``--answers``, a ``readability.py`` result, ``--arm``)
is checked against the gold passages:

- ``q=0``, ``q=0.5``, ``q=1``, ``q=2`` (today's): a fixed weight;
- ``new-words``: 2 x the share of the claim's word weight (IDF over the sources) that is not
  the question's, taken off 2: a claim that says more than the question leans on itself;
- ``question-found``: 2 where the question's best source holds at least half of its word weight,
  else 0: a question its sources do not echo is no guide;
- ``question-gap``: 2 where the question's best source leads the next by 0.2 or more, else 0.5.

Writes ``results/question_weight_<split>.json``::

    python benchmarks/question_weight.py --answers readability_dev_no_refusal.json
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from citebench.data import Item, load_dataset, stored_answers  # noqa: E402
from evidence_candidates import cited_claims  # noqa: E402

from citeformer.evidence import LexicalEvidence  # noqa: E402
from citeformer.evidence.scoring import _LexicalSupport as LexicalSupport  # noqa: E402
from citeformer.evidence.scoring import content_words  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"

Weight = Callable[[LexicalSupport, str, str], float]
"""A rule: the question's weight for (the bound scorer, the question, the claim)."""


def new_words(support: LexicalSupport, question: str, claim: str) -> float:
    idf = support._idf
    words = sorted(set(content_words(claim)) & idf.keys())
    total = sum(idf[w] for w in words)
    asked = set(content_words(question))
    new = sum(idf[w] for w in words if w not in asked) / total if total else 0.0
    return 2.0 * (1.0 - new)


def question_found(support: LexicalSupport, question: str, claim: str) -> float:
    return 2.0 if max(support._question) >= 0.5 else 0.0


def question_gap(support: LexicalSupport, question: str, claim: str) -> float:
    ranked = sorted(support._question, reverse=True)
    gap = ranked[0] - (ranked[1] if len(ranked) > 1 else 0.0)
    return 2.0 if gap >= 0.2 else 0.5


def fixed(weight: float) -> Weight:
    return lambda support, question, claim: weight


RULES: dict[str, Weight] = {
    **{f"q={q:g}": fixed(q) for q in (0.0, 0.5, 1.0, 2.0)},
    "new-words": new_words, "question-found": question_found, "question-gap": question_gap,
}


def scores(item: Item, claim: str, weight: float) -> list[float]:
    """Lexical evidence's scores of ``claim`` with the question weighted ``weight``."""
    return LexicalEvidence(question_weight=weight).bind(item.question, item.sources()).scores(claim)


def first_is_gold(ranked: Sequence[float], gold: set[int]) -> bool:
    return int(np.argmax(ranked)) + 1 in gold


def main(argv: list[str] | None = None) -> None:
    stored, named, arm = stored_answers(RESULTS, argv, __doc__ or "")
    table: dict[str, Any] = {}
    for dataset, arms in stored["sets"].items():
        items = {item.id: item for item in load_dataset(dataset)}
        hits = dict.fromkeys(RULES, 0)
        markers = 0
        for answer in arms[arm]["records"]:
            item = items[answer["item"]]
            support = LexicalSupport(item.question, item.sources(), 0.0)
            gold = item.gold_numbers()
            for _, claim, _ in cited_claims(answer["text"], len(item.passages)):
                markers += 1
                for name, rule in RULES.items():
                    weight = rule(support, item.question, claim)
                    hits[name] += first_is_gold(scores(item, claim, weight), gold)
        table[dataset] = {"markers": markers,
                          **{name: round(hit / markers, 3) for name, hit in hits.items()}}
        print(f"{dataset:12} {markers:3} markers  " + "  ".join(
            f"{name} {share:.2f}" for name, share in table[dataset].items() if name != "markers"
        ), flush=True)
    out = RESULTS / f"question_weight_{stored.get('split', 'dev')}.json"
    out.write_text(json.dumps({"answers": named, "arm": arm, "sets": table},
                              indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
