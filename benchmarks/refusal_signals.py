"""Which signal tells a question the sources answer from one they do not, before generating.

    python benchmarks/refusal_signals.py

For every question of both labeled sets, and for its unanswerable twin
(``citebench.data.unanswerable``: the gold passages swapped for other questions' passages that
lack the answer string), each signal scores how well the sources answer the question:

- ``lexical``: the largest share of the question's content words one source holds;
- ``lexical_sentence``: the same over the sources' sentences (one, or two together), a candidate;
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
Then the defaults that ship (``citeformer.Refusal()`` and ``Refusal(support="embedding")``,
thresholds ``DEFAULT_THRESHOLDS``): per set and split, the share of unanswerable questions refused,
of answerable ones refused (false refusals), and of answerable ones refused once asked the way
users ask (``PHRASINGS``: "According to the sources, ...", "... Cite your answer.").

    python benchmarks/refusal_signals.py --signals lexical embedding --out refusal_defaults.json

Results go to ``benchmarks/results/refusal_signals.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from citebench.data import DATASETS, Item, load_dataset, unanswerable  # noqa: E402

from citeformer import CiteGenerator, Refusal, Source, build_request  # noqa: E402
from citeformer.evidence.refusal import (  # noqa: E402
    DEFAULT_THRESHOLDS,
    embedding_support,
    lexical_support,
)
from citeformer.prompt import build_messages, default_instructions, render_prompt  # noqa: E402
from citeformer.types import Policy  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "refusal_signals.json"
REFUSAL = "The sources do not answer this question."
OFFER = f" If the sources do not answer the question, write only: {REFUSAL}"
SIGNALS = ("lexical", "lexical_sentence", "embedding", "refusal_logprob", "refusal_first")
_SENTENCES = re.compile(r"(?<=[.!?])\s+|\n+")
MAX_FALSE_REFUSALS = 0.05
PHRASINGS = (
    "According to the sources, {question}",
    "{question} Cite your answer.",
    "Please answer briefly and quote the passage that says it: {question}",
)
"""How users wrap a question; an answerable question stays answerable whatever the wrapping."""


def lexical(item: Item) -> float:
    return lexical_support(item.question, item.sources())


def lexical_sentence(item: Item) -> float:
    """``lexical`` with each source cut into its sentences (each with the source's title): the
    share of the question's words one sentence holds, or two together. A candidate, not shipped:
    a passage on the question's topic without its answer scatters the question's words over
    several sentences."""
    sentences = [
        Source(sentence, title=source.title)
        for source in item.sources()
        for sentence in _SENTENCES.split(source.text) if sentence.strip()
    ]
    return lexical_support(item.question, sentences or item.sources())


def embedding(item: Item) -> float:
    return embedding_support(item.question, item.sources())


def defaults_table(items: list[Item]) -> dict[str, Any]:
    """The shipped defaults per measure and split: refused unanswerable, answerable, phrased."""
    table: dict[str, Any] = {}
    negatives = unanswerable(items)
    for support in DEFAULT_THRESHOLDS:
        refusal = Refusal(support=support)

        def refused(group: list[Item], phrasing: str = "{question}",
                    refusal: Refusal = refusal) -> float:
            hits = [refusal.score(phrasing.format(question=i.question), i.sources()) < refusal.limit
                    for i in group]
            return round(sum(hits) / len(hits), 3)

        table[support] = {"threshold": refusal.limit}
        for split in ("dev", "test"):
            answerable = [i for i in items if i.split == split]
            table[support][split] = {
                "refused_unanswerable": refused([i for i in negatives if i.split == split]),
                "refused_answerable": refused(answerable),
                "refused_answerable_phrased": max(refused(answerable, p) for p in PHRASINGS),
                "n": len(answerable),
            }
    return table


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
    parser.add_argument("--signals", nargs="+", choices=SIGNALS, default=list(SIGNALS),
                        help="the signals to measure (the refusal_* ones load the model)")
    parser.add_argument("--out", default=RESULTS.name, help="file name under benchmarks/results")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    logprobs = any(s.startswith("refusal_") for s in args.signals)
    needs_model = args.generate or logprobs
    generator = CiteGenerator.default(progress=False, dtype=args.dtype) if needs_model else None
    report: dict[str, Any] = {"refusal": REFUSAL, "offer": OFFER, "sets": {}}
    started = time.perf_counter()
    for name in DATASETS:
        items = load_dataset(name)
        rows = []
        for kind, group in (("answerable", items), ("unanswerable", unanswerable(items))):
            supports = answer_supports(generator, group) if generator and args.generate else None
            for position, item in enumerate(group):
                row = {"id": item.id, "split": item.split, "kind": kind}
                if "lexical" in args.signals:
                    row["lexical"] = lexical(item)
                if "lexical_sentence" in args.signals:
                    row["lexical_sentence"] = lexical_sentence(item)
                if "embedding" in args.signals:
                    row["embedding"] = embedding(item)
                if generator is not None and logprobs:
                    row["refusal_logprob"], row["refusal_first"] = refusal_scores(generator, item)
                if supports is not None:
                    row["answer_support"] = supports[position]
                    row["answer_embedding"] = (supports[position] + row["embedding"]) / 2
                rows.append(row)
        table = {}
        signals = tuple(s for s in SIGNALS if s in rows[0]) + (
            ("answer_support", "answer_embedding") if supports is not None else ())
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
        defaults = defaults_table(items)
        report["sets"][name] = {"signals": table, "defaults": defaults, "rows": rows}
        print(f"\n{name}: signal, AUC (test), refused unanswerable / answerable (test, "
              f"threshold from dev at <= {MAX_FALSE_REFUSALS:.0%} false refusals)")
        for signal, row in table.items():
            print(f"  {signal:16} {row['auc_test']:.3f}  {row['refused_unanswerable_test']:.2f} "
                  f"/ {row['refused_answerable_test']:.2f}")
        print(f"{name}: the defaults, refused unanswerable / answerable / answerable as users "
              "phrase it (worst phrasing)")
        for support, row in defaults.items():
            for split in ("dev", "test"):
                cell = row[split]
                print(f"  {support:9} < {row['threshold']:<5} {split:4} "
                      f"{cell['refused_unanswerable']:.2f} / {cell['refused_answerable']:.2f} / "
                      f"{cell['refused_answerable_phrased']:.2f}  (n={cell['n']})")
    report["seconds"] = round(time.perf_counter() - started, 1)
    report["dtype"] = str(generator.model.dtype) if generator is not None else None
    out = RESULTS.parent / args.out
    out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(f"\n{report['seconds']} s; written to {out}")


if __name__ == "__main__":
    main()
