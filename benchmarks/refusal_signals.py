"""Which signal tells a question the sources answer from one they do not, before generating.

    python benchmarks/refusal_signals.py

For every question of both labeled sets, and for its unanswerable twin
(``citebench.data.unanswerable``: the gold passages swapped for other questions' passages that
lack the answer string), each signal scores how well the sources answer the question:

- ``lexical``: the largest share of the question's content words one source holds;
- ``embedding``: the largest cosine between the question and one source (all-MiniLM-L6-v2);
- ``refusal_logprob``: minus the mean log-probability per token that the embedded model gives
  the refusal sentence as the whole answer, under REQUIRED's prompt with one sentence added that
  offers it (a model that finds no answer should find the refusal likely: lower is a refusal);
- ``refusal_first``: minus the log-probability of the refusal's first token alone;
- ``answer_support`` (after generating, ``--generate``): the default REQUIRED answer's mean
  evidence score over its markers (``EvidenceSpan.score``, the share of each claim's wording
  that the cited source holds; 0 with no marker), and ``answer_embedding``, the mean of that
  and ``embedding``. Both splits are generated, about 10 minutes on two cores.

For each set and signal: the AUC (how often an answerable question outscores an unanswerable
one, 0.5 is chance) on the test split, and the refusal rates on the test split at the threshold
chosen on the dev split (the highest that refuses at most 5% of dev's answerable questions).
Results go to ``benchmarks/results/refusal_signals.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from citebench.data import Item, load_dataset, unanswerable  # noqa: E402

from citeformer import CiteGenerator, build_request  # noqa: E402
from citeformer.evidence.embeddings import embed  # noqa: E402
from citeformer.evidence.scoring import content_words  # noqa: E402
from citeformer.prompt import build_messages, default_instructions, render_prompt  # noqa: E402
from citeformer.types import Policy  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "refusal_signals.json"
REFUSAL = "The sources do not answer this question."
OFFER = f" If the sources do not answer the question, write only: {REFUSAL}"
SIGNALS = ("lexical", "embedding", "refusal_logprob", "refusal_first")
MAX_FALSE_REFUSALS = 0.05


def lexical(item: Item) -> float:
    words = set(content_words(item.question))
    if not words:
        return 0.0
    return max(len(words & set(content_words(p.text))) / len(words) for p in item.passages)


def embedding(item: Item) -> float:
    question, *passages = embed([item.question, *(p.text for p in item.passages)])
    return max(sum(a * b for a, b in zip(question, p, strict=True)) for p in passages)


def refusal_scores(generator: CiteGenerator, item: Item) -> tuple[float, float]:
    """Minus the mean log-probability of the refusal tokens, and of its first token."""
    import torch

    instructions = default_instructions(Policy.REQUIRED) + OFFER
    messages = build_messages(item.question, item.sources(), Policy.REQUIRED, instructions)
    prompt = render_prompt(messages, generator.tokenizer)
    tokenizer, model = generator.tokenizer, generator.model
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    refusal_ids = tokenizer(REFUSAL, add_special_tokens=False)["input_ids"]
    ids = torch.tensor([prompt_ids + refusal_ids])
    with torch.inference_mode():
        logits = model(ids).logits[0, len(prompt_ids) - 1:-1].float()
    logprobs = torch.log_softmax(logits, dim=-1)
    taken = logprobs[torch.arange(len(refusal_ids)), torch.tensor(refusal_ids)]
    return -float(taken.mean()), -float(taken[0])


def answer_supports(generator: CiteGenerator, items: list[Item]) -> list[float]:
    """The mean evidence score of each item's default answer (64 new tokens, greedy)."""
    requests = [build_request(item.question, item.sources(), "required", max_new_tokens=64)
                for item in items]
    answers = generator.answer_batch(requests, batch_size=8)
    scores = []
    for answer in answers:
        spans = [c.evidence.score if c.evidence is not None else 0.0 for c in answer.citations]
        scores.append(sum(spans) / len(spans) if spans else 0.0)
    return scores


def auc(positives: list[float], negatives: list[float]) -> float:
    """The chance that a positive outscores a negative (ties count half)."""
    wins = sum((p > n) + 0.5 * (p == n) for p in positives for n in negatives)
    return wins / (len(positives) * len(negatives))


def threshold_for(answerable: list[float]) -> float:
    """The highest threshold below which at most MAX_FALSE_REFUSALS of ``answerable`` fall."""
    ordered = sorted(answerable)
    allowed = math.floor(MAX_FALSE_REFUSALS * len(ordered))
    return ordered[allowed]  # refuse when a score is below it: `allowed` answerable ones are


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dtype", default="auto", help="the embedded model's dtype")
    parser.add_argument("--generate", action="store_true",
                        help="also generate the answers of both splits (slow) for answer_support")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    generator = CiteGenerator.default(progress=False, dtype=args.dtype)
    report: dict[str, Any] = {"refusal": REFUSAL, "offer": OFFER, "sets": {}}
    started = time.perf_counter()
    for name in ("encyclopedic", "technical"):
        items = load_dataset(name)
        rows = []
        for kind, group in (("answerable", items), ("unanswerable", unanswerable(items))):
            supports = answer_supports(generator, group) if args.generate else None
            for position, item in enumerate(group):
                logprob, first = refusal_scores(generator, item)
                row = {"id": item.id, "split": item.split, "kind": kind,
                       "lexical": lexical(item), "embedding": embedding(item),
                       "refusal_logprob": logprob, "refusal_first": first}
                if supports is not None:
                    row["answer_support"] = supports[position]
                    row["answer_embedding"] = (supports[position] + row["embedding"]) / 2
                rows.append(row)
        table = {}
        signals = SIGNALS + (("answer_support", "answer_embedding") if args.generate else ())
        for signal in signals:
            def scores(
                split: str, kind: str, signal: str = signal, rows: list[dict[str, Any]] = rows
            ) -> list[float]:
                return [r[signal] for r in rows if r["split"] == split and r["kind"] == kind]

            threshold = threshold_for(scores("dev", "answerable"))
            test_answerable, test_unanswerable = scores("test", "answerable"), scores(
                "test", "unanswerable")
            table[signal] = {
                "auc_test": round(auc(test_answerable, test_unanswerable), 3),
                "threshold_dev": round(threshold, 4),
                "refused_unanswerable_test": round(
                    sum(s < threshold for s in test_unanswerable) / len(test_unanswerable), 3),
                "refused_answerable_test": round(
                    sum(s < threshold for s in test_answerable) / len(test_answerable), 3),
                "n_test": [len(test_answerable), len(test_unanswerable)],
            }
        report["sets"][name] = {"signals": table, "rows": rows}
        print(f"\n{name}: signal, AUC (test), refused unanswerable / answerable (test, "
              f"threshold from dev at <= {MAX_FALSE_REFUSALS:.0%} false refusals)")
        for signal, row in table.items():
            print(f"  {signal:16} {row['auc_test']:.3f}  {row['refused_unanswerable_test']:.2f} "
                  f"/ {row['refused_answerable_test']:.2f}")
    report["seconds"] = round(time.perf_counter() - started, 1)
    report["dtype"] = str(generator.model.dtype)
    RESULTS.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(f"\n{report['seconds']} s; written to {RESULTS}")


if __name__ == "__main__":
    main()
