"""Train the answerability reader's head on the generated questions (answerability_data.py).

    python benchmarks/answerability_data.py     # the training questions, once
    python benchmarks/answerability_train.py --head logistic
    python benchmarks/answerability_train.py --head mlp

Each (question, passage) pair of ``benchmarks/data/answerability_train.jsonl`` is read by
``answerability_reader.pair_features`` (one MiniLM pass per question and its
passages, one thread; cached in ``benchmarks/data/answerability_features.npz``), and a head is
fitted on four fifths of the documents, the fifth left out to report on: ``logistic`` (logistic
regression) or ``mlp`` (one hidden layer of ``--hidden`` tanh units), both with L2 weight decay
and the positives weighted as much as the negatives together. It reports the left-out pairs'
AUC and the AUC of each question's best passage with and without its answering one (what a
refusal sees), and writes the head to ``--out`` (by default the one the study keeps,
``benchmarks/results/answerability_head.json``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from answerability_data import data_files  # noqa: E402
from answerability_reader import (
    FEATURES,
    HEAD,
    READER_VERSION,
    pair_features,
    source_text,
    token_states,
)

from citeformer.evidence.refusal import question_words
from citeformer.types import Source

HERE = Path(__file__).resolve().parent
FEATURE_SETS = {"first": FEATURES[:12], "all": FEATURES}


def features(
    records: list[dict[str, Any]], data: Path, cache: Path
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Features, labels and question numbers of every pair, cached by the data's hash."""
    digest = hashlib.sha256(data.read_bytes()).hexdigest()[:16] + "-" + ",".join(FEATURES)
    if cache.exists():
        cached = np.load(cache)
        if str(cached["digest"]) == digest:
            return cached["x"], cached["y"], cached["question"]
    from citeformer.evidence.embeddings import load_minilm

    model = load_minilm()
    rows, labels, owners = [], [], []
    started = time.perf_counter()
    for number, record in enumerate(records):
        question = record["question"]
        sources = [Source(p["text"], title=p["title"]) for p in record["passages"]]
        asked, *read = token_states(model, [question, *map(source_text, sources)])
        words = question_words(question)
        for source, states, passage in zip(sources, read, record["passages"], strict=True):
            rows.append(pair_features(question, asked, source, states, words))
            labels.append(passage["label"])
            owners.append(number)
        if number % 100 == 0:
            print(f"  {number} questions, {time.perf_counter() - started:.0f} s", file=sys.stderr)
    x, y, q = np.asarray(rows, np.float32), np.asarray(labels, np.float32), np.asarray(owners)
    np.savez(cache, x=x, y=y, question=q, digest=digest)
    return x, y, q


def auc(positives: np.ndarray, negatives: np.ndarray) -> float:
    """The chance that a positive outscores a negative (ties count half)."""
    if not len(positives) or not len(negatives):
        return float("nan")
    ranked = np.concatenate([positives, negatives])
    order = ranked.argsort(kind="stable")
    ranks = np.empty(len(ranked))
    ranks[order] = np.arange(1, len(ranked) + 1)
    for value in np.unique(ranked):  # ties share their mean rank
        tied = ranked == value
        ranks[tied] = ranks[tied].mean()
    wins = ranks[:len(positives)].sum() - len(positives) * (len(positives) + 1) / 2
    return float(wins / (len(positives) * len(negatives)))


def fit(x: np.ndarray, y: np.ndarray, *, head: str, hidden: int, decay: float, seed: int,
        epochs: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """The head's layers, fitted by full-batch Adam on weighted cross-entropy."""
    import torch

    torch.manual_seed(seed)
    inputs, targets = torch.tensor(x), torch.tensor(y)
    if head == "logistic":
        model = torch.nn.Linear(x.shape[1], 1)
    else:
        model = torch.nn.Sequential(torch.nn.Linear(x.shape[1], hidden), torch.nn.Tanh(),
                                    torch.nn.Linear(hidden, 1))
    positive_weight = torch.tensor((1 - y).sum() / max(y.sum(), 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=decay)
    for _ in range(epochs):
        optimizer.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(
            model(inputs)[:, 0], targets, pos_weight=positive_weight)
        loss.backward()
        optimizer.step()
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    return [(m.weight.detach().numpy().T.copy(), m.bias.detach().numpy().copy()) for m in linears]


def predict(layers: list[tuple[np.ndarray, np.ndarray]], x: np.ndarray) -> np.ndarray:
    hidden = x
    for number, (weight, bias) in enumerate(layers):
        hidden = hidden @ weight + bias
        if number < len(layers) - 1:
            hidden = np.tanh(hidden)
    return 1 / (1 + np.exp(-hidden[:, 0]))


def question_aucs(scores: np.ndarray, y: np.ndarray, q: np.ndarray) -> float:
    """AUC of each question's best passage with its answer against its best without it."""
    with_answer, without = [], []
    for number in np.unique(q):
        mine = q == number
        with_answer.append(scores[mine].max())
        without.append(scores[mine & (y == 0)].max())
    return auc(np.asarray(with_answer), np.asarray(without))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", type=int, choices=(1, 2), default=2,
                        help="the training questions of answerability_data.py --recipe")
    parser.add_argument("--head", choices=("logistic", "mlp"), default="logistic")
    parser.add_argument("--hidden", type=int, default=16)
    parser.add_argument("--decay", type=float, default=1e-3)
    parser.add_argument("--epochs", type=int, default=1500)
    parser.add_argument("--seed", type=int, default=46)
    parser.add_argument("--sources", nargs="+", default=None,
                        help="train on these sources only (man, rust, docstrings)")
    parser.add_argument("--negatives", nargs="+", default=None,
                        help="keep these near misses only (removed, neighbour, lexical)")
    parser.add_argument("--features", choices=tuple(FEATURE_SETS), default="first",
                        help="first: the first twelve features; all: with the second set too")
    parser.add_argument("--out", type=Path, default=HEAD)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    data, summary = data_files(args.recipe)
    records = [json.loads(line) for line in data.read_text(encoding="utf-8").splitlines()]
    x, y, q = features(records, data, HERE / "data" / f"answerability_features_r{args.recipe}.npz")
    chosen = list(FEATURE_SETS[args.features])
    x = x[:, [FEATURES.index(name) for name in chosen]]
    kinds = np.asarray([p["kind"] for r in records for p in r["passages"]])
    sources = np.asarray([r["source"] for r in records])[q]
    keep = np.ones(len(y), bool)
    if args.sources:
        keep &= np.isin(sources, args.sources)
    if args.negatives:
        keep &= (y == 1) | np.isin(kinds, args.negatives)
    # Held out by document: no question of a left-out document is trained on.
    documents = np.asarray([int(hashlib.md5(r["document"].encode()).hexdigest(), 16) % 5
                            for r in records])[q]
    train, held = keep & (documents != 0), keep & (documents == 0)
    mean, scale = x[train].mean(axis=0), x[train].std(axis=0) + 1e-6
    standard = (x - mean) / scale
    layers = fit(standard[train], y[train], head=args.head, hidden=args.hidden,
                 decay=args.decay, seed=args.seed, epochs=args.epochs)
    scores = predict(layers, standard)
    report = {
        "pairs_train": int(train.sum()), "pairs_held_out": int(held.sum()),
        "auc_pairs_held_out": round(auc(scores[held & (y == 1)], scores[held & (y == 0)]), 4),
        "auc_questions_held_out": round(question_aucs(scores[held], y[held], q[held]), 4),
        "auc_pairs_train": round(auc(scores[train & (y == 1)], scores[train & (y == 0)]), 4),
        "auc_by_negative_held_out": {
            kind: round(auc(scores[held & (y == 1)], scores[held & (kinds == kind)]), 4)
            for kind in sorted(set(kinds) - {"answer"})},
    }
    print(json.dumps(report, indent=1))
    made = json.loads(summary.read_text(encoding="utf-8"))
    weights = {
        "version": READER_VERSION,
        "features": chosen,
        "mean": [round(float(v), 6) for v in mean],
        "scale": [round(float(v), 6) for v in scale],
        "layers": [[np.round(w, 6).tolist(), np.round(b, 6).tolist()] for w, b in layers],
        "trained": {
            "head": args.head, "feature_set": args.features,
            "hidden": args.hidden if args.head == "mlp" else None,
            "decay": args.decay, "epochs": args.epochs, "seed": args.seed,
            "sources": args.sources or sorted(made["by_source"]),
            "negatives": args.negatives or sorted(made["negatives"]),
            "data": {k: made[k] for k in ("recipe", "questions", "pairs", "by_source",
                                          "negatives", "seed")},
            **report,
        },
    }
    args.out.write_text(json.dumps(weights) + "\n", encoding="utf-8")
    print(f"written to {args.out} ({args.out.stat().st_size} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
