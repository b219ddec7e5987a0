"""Which signal tells a question the sources answer from one they do not, before generating.

    python benchmarks/refusal_signals.py

For every question of both labeled sets, and for its unanswerable twin
(``citebench.data.unanswerable``: the gold passages swapped for other questions' passages that
lack the answer string), each signal scores how well the sources answer the question:

- ``lexical``: the largest share of the question's content words one source holds;
- ``lexical_sentence``: the same over the sources' sentences (one, or two together), a candidate;
- ``embedding``: the largest cosine between the question and one source (all-MiniLM-L6-v2);
- candidates (``CANDIDATES``, no model beyond MiniLM): ``lexical_key`` (``lexical`` with the
  question's key words, those of its code spans and its capitalized or numeric words, counting
  three times), ``lexical_ident`` (``lexical``, halved when a code identifier the question names,
  such as `textwrap.fill` or `__exit__()`, is written in no source), ``lexical_embedding`` (the
  mean of ``lexical`` and ``embedding``) and ``key_ident_embedding`` (the mean of ``embedding``
  and ``lexical_key`` halved as ``lexical_ident`` is);
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
import functools
import itertools
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
    question_words,
)
from citeformer.evidence.scoring import content_words  # noqa: E402
from citeformer.prompt import build_messages, default_instructions, render_prompt  # noqa: E402
from citeformer.types import Policy  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "refusal_signals.json"
REFUSAL = "The sources do not answer this question."
OFFER = f" If the sources do not answer the question, write only: {REFUSAL}"
CANDIDATE_NAMES = ("lexical_key", "lexical_ident", "lexical_embedding", "key_ident_embedding")
SIGNALS = ("lexical", "lexical_sentence", "embedding", *CANDIDATE_NAMES, "refusal_logprob",
           "refusal_first")
_SENTENCES = re.compile(r"(?<=[.!?])\s+|\n+")
MAX_FALSE_REFUSALS = 0.05
MAX_SHARED_FALSE_REFUSALS = 1
"""A threshold shared by the three sets: chosen on the union of their dev splits' answerable
questions for at most this many false refusals (and for none, beside it)."""
KEY_WEIGHT = 3.0
"""How many times a key word of the question counts in ``lexical_key`` (chosen on dev)."""
IDENT_FACTOR = 0.5
"""What ``lexical_ident`` multiplies support by when a named identifier is in no source."""
_CODE_SPAN = re.compile(r"`([^`]+)`")
_WORD = re.compile(r"[^\W_]+")
# An identifier a question names in a code span: one with a dot or an underscore in it.
_IDENTIFIER = re.compile(r"`([^`]*[._][^`]*)`")
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


@functools.cache
def embedding(item: Item) -> float:
    return embedding_support(item.question, item.sources())


def key_words(question: str) -> set[str]:
    """The words that name what a question is about rather than its topic: those of its code
    spans (`textwrap.fill` gives textwrap, fill) and, outside them, its capitalized words but the
    first, and its words with a digit; of two characters or more."""
    keys = [w for span in _CODE_SPAN.findall(question) for w in _WORD.findall(span)]
    words = _WORD.findall(_CODE_SPAN.sub(" ", question))
    keys += [w for position, w in enumerate(words)
             if (position > 0 and w[0].isupper()) or any(c.isdigit() for c in w)]
    return {w for w in content_words(" ".join(keys)) if len(w) >= 2}


def weighted_cover(weights: dict[str, float], sources: list[Source]) -> float:
    """The largest weighted share of the question's words one source, or two together, hold
    (``lexical_support``'s rule with a weight per word); 1.0 with no word."""
    total = sum(weights.values())
    if not total:
        return 1.0
    held = list(dict.fromkeys(
        frozenset(set(weights) & set(content_words(f"{s.title or ''} {s.text}"))) for s in sources
    ))
    best = max(held, key=lambda h: sum(weights[w] for w in h), default=frozenset())
    for one, other in itertools.combinations(held, 2):
        if sum(weights[w] for w in one | other) > sum(weights[w] for w in best):
            best = one | other
    return sum(weights[w] for w in best) / total


def lexical_key(item: Item) -> float:
    """``lexical`` with each key word of the question (``key_words``) counting KEY_WEIGHT times:
    an unanswerable twin's sources hold the question's topic words but lack the name it asks
    about ("Eiffel" in "In what year was the Eiffel Tower completed?")."""
    keys = key_words(item.question)
    return weighted_cover(
        {w: KEY_WEIGHT if w in keys else 1.0 for w in question_words(item.question)},
        item.sources())


def identifier_missing(item: Item) -> bool:
    """Whether an identifier the question names in a code span (one with a dot or underscore;
    a trailing ``()`` dropped) is written in no source's title or text (case-insensitive, not
    as part of a longer name: `shutil.copy` is not in "shutil.copy2")."""
    text = " ".join(f"{s.title or ''} {s.text}" for s in item.sources()).lower()
    for name in _IDENTIFIER.findall(item.question):
        name = re.sub(r"\(\)$", "", name.strip()).lower()
        if not re.search(r"(?<![\w.])" + re.escape(name) + r"(?!\w)", text):
            return True
    return False


def lexical_ident(item: Item) -> float:
    """``lexical``, times IDENT_FACTOR when the question names an identifier no source writes."""
    return lexical(item) * (IDENT_FACTOR if identifier_missing(item) else 1.0)


def lexical_embedding(item: Item) -> float:
    """The mean of ``lexical`` and ``embedding``."""
    return (lexical(item) + embedding(item)) / 2


def key_ident_embedding(item: Item) -> float:
    """The mean of ``embedding`` and ``lexical_key`` (times IDENT_FACTOR as ``lexical_ident``)."""
    key = lexical_key(item) * (IDENT_FACTOR if identifier_missing(item) else 1.0)
    return (key + embedding(item)) / 2


CANDIDATES = {
    "lexical_key": lexical_key,
    "lexical_ident": lexical_ident,
    "lexical_embedding": lexical_embedding,
    "key_ident_embedding": key_ident_embedding,
}


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


def shared_thresholds(report: dict[str, Any]) -> dict[str, Any]:
    """Per signal, one threshold for all sets from the union of their dev answerable scores
    (the highest below which at most MAX_SHARED_FALSE_REFUSALS, then none, fall), and the test
    refusal rates it gives on each set."""
    sets = report["sets"]
    signals = [s for s in sets[next(iter(sets))]["signals"]]
    shared: dict[str, Any] = {}
    for signal in signals:
        dev = sorted(r[signal] for table in sets.values() for r in table["rows"]
                     if r["split"] == "dev" and r["kind"] == "answerable")
        shared[signal] = {}
        for allowed in sorted({MAX_SHARED_FALSE_REFUSALS, 0}, reverse=True):
            threshold = dev[allowed]
            cells = {}
            for name, table in sets.items():
                test = [r for r in table["rows"] if r["split"] == "test"]
                for kind in ("unanswerable", "answerable"):
                    scores = [r[signal] for r in test if r["kind"] == kind]
                    cells.setdefault(name, {})[f"refused_{kind}_test"] = round(
                        sum(s < threshold for s in scores) / len(scores), 3)
            shared[signal][f"<={allowed}"] = {"threshold": round(threshold, 4), "sets": cells}
    return shared


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
                for signal, measure in CANDIDATES.items():
                    if signal in args.signals:
                        row[signal] = measure(item)
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
    report["shared"] = shared_thresholds(report)
    print("\none threshold for the three sets, chosen on the union of their dev splits for at "
          f"most {MAX_SHARED_FALSE_REFUSALS} false refusal (then for none): refused unanswerable / "
          "answerable on each test split")
    for signal, row in report["shared"].items():
        for allowed, cell in row.items():
            print(f"  {signal:20} {allowed} false  < {cell['threshold']:<7.4f} " + "  ".join(
                f"{name} {c['refused_unanswerable_test']:.2f} / {c['refused_answerable_test']:.2f}"
                for name, c in cell["sets"].items()))
    report["seconds"] = round(time.perf_counter() - started, 1)
    report["dtype"] = str(generator.model.dtype) if generator is not None else None
    out = RESULTS.parent / args.out
    out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(f"\n{report['seconds']} s; written to {out}")


if __name__ == "__main__":
    main()
