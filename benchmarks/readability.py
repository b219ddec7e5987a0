"""Readability levers side by side: each arm answers the same questions of one split of both sets.

    python benchmarks/readability.py --split dev --arms plain default no-end-bias
    python benchmarks/readability.py --split test --arms unconstrained plain default

Arms are generation settings of the embedded model under one policy (``--policy``, REQUIRED by
default): ``plain`` is the grammar and decoding before the readability levers (a cite-group may
follow punctuation: no readability processor), ``default`` what ``generate`` does now, the others
one lever changed from the default. Each arm's answers are measured with the benchmark's own
metrics (``citebench.metrics``); the table and every answer go to
``benchmarks/results/readability_<split>.json``, written after every arm; arms stored there by an
earlier run with the same split, policy and token budget are kept unless run again (``--fresh``
drops them). Greedy decoding, evidence ``"lexical"`` (the default) unless the arm says otherwise,
decoded in batches (``CiteGenerator.answer_batch``; tokens/s is then per question of a batch).

``refused`` is the share of answers that are the refusal sentence (``CitedAnswer.abstained``):
on the answerable questions, false refusals. ``--unanswerable`` also answers each question's
unanswerable twin (``citebench.data.unanswerable``) and reports the share of those refused.

    python benchmarks/readability.py --split test --arms default no-refusal --unanswerable

``mask-first`` is the default settings with the other split of the work inside a serving engine:
the engine masks the whole grammar itself (vLLM's structured outputs) and the levers read what
its mask left, so what the model wanted where the grammar says no is gone before any lever reads
it (the end-intent lever moves exactly that). Emulated in process: each step's logits get the
rows' own grammar mask before the steering runs (which applies the same mask again, a no-op).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from citebench.data import Item, load_dataset, unanswerable  # noqa: E402
from citebench.metrics import measure, rate_text, summarize  # noqa: E402

from citeformer import CiteGenerator, Policy, build_request  # noqa: E402
from citeformer.evidence import LexicalEvidence  # noqa: E402
from citeformer.evidence.refusal import Refusal  # noqa: E402
from citeformer.prompt import default_instructions  # noqa: E402
from citeformer.readability import OFF, Readability  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
DEFAULT = Readability()
# REQUIRED's instructions before the answer-first cue (its last sentence) was added to them.
ANSWER_FIRST_CUE = (
    " Begin with one sentence that answers the question, in the question's own words."
)
WITHOUT_ANSWER_FIRST = default_instructions(Policy.REQUIRED).removesuffix(ANSWER_FIRST_CUE)

ARMS: dict[str, dict[str, Any]] = {
    "unconstrained": {"constrained": False},
    "plain": {"readability": None},
    "default": {},
    "mask-first": {},
    "cite-after-punctuation": {"readability": replace(DEFAULT, cite_after_punctuation=True)},
    "no-end-intent": {"readability": replace(DEFAULT, end_intent=False)},
    "no-repeat-block": {"readability": replace(DEFAULT, no_repeat_ngram=0)},
    "no-word-repeat": {"readability": replace(DEFAULT, no_repeat_words=0)},
    "no-repeat-blocks": {"readability": replace(DEFAULT, no_repeat_ngram=0, no_repeat_words=0)},
    "no-number-copy": {"readability": replace(DEFAULT, number_penalty=0.0)},
    "no-period-after-marker": {"readability": replace(DEFAULT, period_after_marker=False)},
    "no-end-bias": {"readability": replace(DEFAULT, end_bias=0.0)},
    "no-auto-support": {"readability": replace(DEFAULT, auto_cite_support=None)},
    "end-bias-1": {"readability": replace(DEFAULT, end_bias=1.0)},
    "end-bias-3": {"readability": replace(DEFAULT, end_bias=3.0)},
    "repeat-4": {"readability": replace(DEFAULT, no_repeat_ngram=4)},
    "period-only": {"sentence_ends": "."},
    "no-source-terms": {"source_terms": False},
    "no-wrap-up": {"readability": replace(DEFAULT, wrap_up_words=0)},
    "wrap-up-8": {"readability": replace(DEFAULT, wrap_up_words=8)},
    "evidence-embedding": {"evidence": "embedding"},
    "question-0": {"evidence": LexicalEvidence(question_weight=0)},
    "question-1": {"evidence": LexicalEvidence(question_weight=1)},
    "question-2": {"evidence": LexicalEvidence(question_weight=2)},
    "question-4": {"evidence": LexicalEvidence(question_weight=4)},
    "lexical-weight-8": {"evidence": LexicalEvidence(weight=8)},
    "no-punctuation-run": {"readability": replace(DEFAULT, max_punctuation_run=0)},
    "off": {"readability": OFF},
    "no-refusal": {"refusal": None},
    "refusal-embedding": {"refusal": Refusal(support="embedding")},
    "meaning": {"evidence": "embedding", "refusal": Refusal(support="embedding")},
    "no-cite-closed": {"readability": replace(DEFAULT, cite_closed=False)},
    "no-claim-words": {"readability": replace(DEFAULT, min_claim_words=0)},
    "no-clause-end": {"readability": replace(DEFAULT, clause_support=None)},
    "no-answer-first": {"instructions": WITHOUT_ANSWER_FIRST},
    "code-4": {"readability": replace(DEFAULT, code_penalty=4.0)},
    "code-8": {"readability": replace(DEFAULT, code_penalty=8.0)},
}

COLUMNS = (
    ("precision", "precision"), ("claim_best", "claim best"), ("cites_gold", "cites gold"),
    ("correctness", "correct"),
    ("finished", "finished"), ("repetition", "repeats"), ("after_punctuation", "after ,;:("),
    ("after_dangling_word", "after the/of"), ("long_sentences", "at bound"),
    ("coverage", "coverage"), ("fragments", "fragments"), ("punctuation_runs", "runs ****"),
    ("open_spans", "in open ( \" `"), ("abstained", "refused"),
)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--split", choices=("dev", "test"), default="dev")
    parser.add_argument("--arms", nargs="+", choices=list(ARMS), default=["plain", "default"])
    parser.add_argument("--datasets", nargs="+", default=["technical", "encyclopedic", "api"])
    parser.add_argument("--policy", default="required")
    parser.add_argument("--max-new-tokens", type=int, default=160)
    parser.add_argument("--limit", type=int, default=None, help="questions per set (smoke run)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--dtype", default="auto",
                        help="the model's dtype: auto (the default's), float32, bfloat16")
    parser.add_argument("--batch-size", type=int, default=8,
                        help="rows decoded together (answer_batch); greedy answers as generate's")
    parser.add_argument("--fresh", action="store_true", help="drop the arms stored before")
    parser.add_argument("--unanswerable", action="store_true",
                        help="also answer each question's unanswerable twin (refusal rate)")
    parser.add_argument("--out", default=None,
                        help="file written in benchmarks/results (readability_<split>.json)")
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    gen = CiteGenerator.default(progress=False, dtype=args.dtype)
    policy = Policy.coerce(args.policy)
    out = RESULTS / (args.out or f"readability_{args.split}.json")
    results: dict[str, Any] = {"split": args.split, "policy": policy.value,
                               "max_new_tokens": args.max_new_tokens,
                               "dtype": str(gen.model.dtype), "sets": {}}
    if not args.fresh and args.limit is None:
        results["sets"] = _stored_arms(out, results)
    for dataset in args.datasets:
        labeled = load_dataset(dataset)
        items = [i for i in labeled if i.split == args.split][: args.limit]
        # The twins of the whole set, as benchmarks/refusal_signals.py builds them.
        twins = [i for i in unanswerable(labeled) if i.split == args.split][: args.limit]
        twins = twins if args.unanswerable else []
        table: dict[str, Any] = results["sets"].setdefault(dataset, {})
        for arm in args.arms:
            records, summary, settings = _answer(gen, items, arm, args)
            table[arm] = {"settings": settings, "summary": summary, "records": records}
            line = "  ".join(f"{label} {rate_text(summary[key])}" for key, label in COLUMNS)
            if twins:
                twin_records, twin_summary, _ = _answer(gen, twins, arm, args)
                table[arm]["unanswerable"] = {"summary": twin_summary, "records": twin_records}
                line += f"  unanswerable refused {rate_text(twin_summary['abstained'])}"
                line += f" (n={len(twins)})"
            print(f"{dataset:12} {arm:16} {line}  unsupported "
                  f"{rate_text(summary['unsupported_sentences'])} "
                  f"({summary['unsupported_per_answer']} of {summary['sentences_per_answer']} "
                  f"sentences an answer)  numbers-not-in-sources "
                  f"{summary['unsupported_numbers']}  tok/s "
                  f"{summary['tokens_per_second'].get('median', 0):.1f}", flush=True)
            RESULTS.mkdir(exist_ok=True)
            out.write_text(json.dumps(results, indent=1, default=str))
    print(f"wrote {out}")


def _answer(
    gen: CiteGenerator, items: list[Item], arm: str, args: argparse.Namespace
) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any]]:
    """One arm's answers to ``items``, measured: the records, their summary, the settings."""
    policy = Policy.coerce(args.policy)
    requests = [build_request(item.question, item.sources(), policy,
                              max_new_tokens=args.max_new_tokens, **ARMS[arm]) for item in items]
    started = time.perf_counter()
    with _masked_first(arm == "mask-first"):
        answers = gen.answer_batch(requests, batch_size=args.batch_size)
    seconds = (time.perf_counter() - started) / max(len(items), 1)
    records = []
    for item, answer in zip(items, answers, strict=True):
        record = measure(item, answer.text, answer.finish_reason)
        record.update(item=item.id, text=answer.text, error=None, abstained=answer.abstained,
                      generated_tokens=answer.generated_tokens, seconds=seconds)
        records.append(record)
    return records, summarize(records), _settings(requests[0])


@contextlib.contextmanager
def _masked_first(active: bool) -> Iterator[None]:
    """While active, every row's grammar mask is applied before the steering reads the logits."""
    if not active:
        yield
        return
    import xgrammar as xgr

    from citeformer.decoding import engine, hf

    class MaskFirst(hf.SteeringLogitsProcessor):
        """``SteeringLogitsProcessor`` behind an engine that masks the whole grammar first."""

        def __call__(self, input_ids: Any, scores: Any) -> Any:
            if self._started:
                last = input_ids[:, -1].tolist()
                self._live = [i for i in self._live if last[i] not in self._stop]
                hf.advance_all([self._rows[i] for i in self._live],
                               [last[i] for i in self._live])
            self._started = True
            rows = [(i, self._rows[i]) for i in self._live]
            bitmask = xgr.allocate_token_bitmask(scores.shape[0], scores.shape[-1])
            for i, row in rows:  # the engine's structured output: the row's whole grammar
                row.matcher.fill_next_token_bitmask(bitmask, i)
                if row.word_bound is not None:
                    row.word_bound.restrict(bitmask.numpy()[i])
            xgr.apply_token_bitmask_inplace(scores, bitmask, indices=[i for i, _ in rows])
            started = time.perf_counter()
            self._steering.apply(scores, rows)
            self.seconds.append(time.perf_counter() - started)
            return scores

    saved = engine.SteeringLogitsProcessor
    engine.SteeringLogitsProcessor = MaskFirst
    try:
        yield
    finally:
        engine.SteeringLogitsProcessor = saved


def _settings(request: Any) -> dict[str, Any]:
    """What an arm ran with, stored beside its answers so an older run stays readable."""
    return {
        "constrained": request.constrained,
        "readability": asdict(request.readability) if request.readability else None,
        "evidence": repr(request.evidence),
        "sentence_ends": request.grammar.sentence_ends,
        "source_terms": request.grammar.source_terms,
        "refusal": repr(request.refusal),
        "instructions": request.instructions,
    }


def _stored_arms(path: Path, settings: dict[str, Any]) -> dict[str, Any]:
    """The arms a run with the same settings stored in ``path``; none when they differ."""
    if not path.exists():
        return {}
    stored = json.loads(path.read_text())
    keys = ("split", "policy", "max_new_tokens", "dtype")
    same = all(stored.get(key) == settings[key] for key in keys)
    return dict(stored.get("sets", {})) if same else {}


if __name__ == "__main__":
    main()
