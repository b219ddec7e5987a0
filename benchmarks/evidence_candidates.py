"""Evidence that reads meaning: two candidates read on stored answers, beside lexical evidence.

For each marker of stored answers (``--answers``, a ``readability.py`` result, ``--arm``), the
claim it cites (``citeformer.evidence.claim_of``) is scored against every source three ways, and
the source each way ranks first is checked against the question's gold passages:

- ``lexical``: today's default scorer (``LexicalEvidence``);
- ``likelihood``: the embedded model's log-probability of the claim as the answer to the question
  with that source alone in the prompt (one forward pass per source and claim);
- ``attention``: the embedded model's attention, averaged over layers and heads, from the claim's
  tokens to each source's tokens, with the answer's real prompt and the answer so far before it
  (one forward pass with eager attention per claim: in process only, since vLLM and llama.cpp
  return no attention);

and the two mixes that could keep lexical's precision where the words are there: lexical plus a
weight times the likelihood's softmax over sources (``lexical+likelihood``), and lexical plus a
weight times each source's share of the attention (``lexical+attention``).

The answers were written with lexical evidence steering their markers, so ``chosen`` (the marker
the answer holds) is what that steering gave; a candidate's share says how often it would have
named a gold passage for the same claim. The claims themselves stay as written. Writes
``results/evidence_candidates_<split>.json``::

    python benchmarks/readability.py --split dev --datasets paraphrase technical encyclopedic api \\
        --arms no-refusal --max-new-tokens 100 --dtype float32 --out readability_dev_no_refusal.json
    python benchmarks/evidence_candidates.py --answers readability_dev_no_refusal.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from citebench.data import Item, load_dataset  # noqa: E402

from citeformer import CiteGenerator, Policy, Source, scan_markers  # noqa: E402
from citeformer.evidence.scoring import LexicalEvidence, claim_of  # noqa: E402
from citeformer.grammar.markers import OPEN_GROUP  # noqa: E402
from citeformer.prompt import build_messages, render_prompt  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
LIKELIHOOD_MIXES = ((0.5, 4.0), (0.5, 8.0), (1.0, 8.0))  # (weight, temperature in nats)
ATTENTION_MIXES = (0.5, 1.0, 2.0)


def cited_claims(text: str, n_sources: int) -> Iterator[tuple[int, str, str]]:
    """Each marker of ``text``: its id, the claim it cites, and the answer up to the claim's end.

    The markers are the ones the metrics count (``scan_markers``); a marker stacked after another
    (``[1][3]``) cites the same claim as the first (``claim_before_marker``).
    """
    for citation in scan_markers(text, n_sources).citations:
        opened = text[: citation.start + 1]  # ends in the group this marker opens or continues
        group = OPEN_GROUP.search(opened)
        head = opened[: group.start()].rstrip() if group else opened[:-1].rstrip()
        yield citation.source_id, claim_of(head), head


def source_spans(prompt: str, sources: Sequence[Source]) -> list[tuple[int, int]]:
    """Where each source's text lies in ``prompt``, after the worked example's sources."""
    header = f"[1] {sources[0].title}" if sources[0].title else "[1]\n"
    position = prompt.rindex(header)
    spans = []
    for source in sources:
        text = source.text.strip()
        start = prompt.index(text, position)
        spans.append((start, start + len(text)))
        position = start + len(text)
    return spans


class Scorers:
    """The embedded model's likelihood and attention scores of a claim against every source."""

    def __init__(self) -> None:
        import torch

        self.torch = torch
        gen = CiteGenerator.default(progress=False, dtype="float32")
        self.model, self.tokenizer = gen.model, gen.tokenizer
        self.model.set_attn_implementation("eager")

    def likelihood(self, item: Item, claim: str) -> list[float]:
        """log p(claim | one source and the question), per source, in nats."""
        torch, tokenizer = self.torch, self.tokenizer
        answer = tokenizer(claim, add_special_tokens=False).input_ids
        if not answer:
            return [0.0] * len(item.passages)
        rows = []
        for source in item.sources():
            text = f"{source.title}: {source.text}" if source.title else source.text
            messages = [{"role": "user", "content": f"Source: {text}\n\nQuestion: {item.question}"}]
            prompt = render_prompt(messages, tokenizer)
            rows.append(tokenizer(prompt, add_special_tokens=False).input_ids + answer)
        width = max(map(len, rows))
        ids = torch.zeros((len(rows), width), dtype=torch.long)
        attention = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):  # left-padded: every row's claim ends the row
            ids[i, width - len(row):] = torch.tensor(row)
            attention[i, width - len(row):] = 1
        with torch.no_grad():
            logits = self.model(input_ids=ids, attention_mask=attention).logits.float()
        n = len(answer)
        chosen = torch.log_softmax(logits[:, -n - 1:-1], dim=-1)
        return chosen.gather(-1, ids[:, -n:, None])[..., 0].sum(dim=-1).tolist()  # type: ignore[no-any-return]

    def attention(self, item: Item, claim: str, head: str) -> list[float]:
        """Mean attention from the claim's tokens to each source's tokens (layers, heads)."""
        torch, tokenizer = self.torch, self.tokenizer
        sources = item.sources()
        prompt = render_prompt(build_messages(item.question, sources, Policy.REQUIRED), tokenizer)
        encoded = tokenizer(prompt + head, return_offsets_mapping=True, add_special_tokens=False)
        offsets = encoded["offset_mapping"]
        claim_start = len(prompt) + len(head) - len(claim)
        reading = [i for i, (start, _) in enumerate(offsets) if start >= claim_start]
        if not reading:
            return [0.0] * len(sources)
        with torch.no_grad():
            found = self.model(input_ids=torch.tensor([encoded["input_ids"]]),
                               output_attentions=True).attentions
        weights = torch.stack([layer[0] for layer in found])[:, :, reading, :]  # L, H, claim, all
        scores = []
        for start, end in source_spans(prompt, sources):
            tokens = [i for i, (a, b) in enumerate(offsets) if a >= start and b <= end and b > a]
            scores.append(float(weights[..., tokens].sum(dim=-1).mean()))
        return scores


def _softmax(values: Sequence[float], temperature: float) -> np.ndarray:
    scaled = np.asarray(values) / temperature
    exp = np.exp(scaled - scaled.max())
    return exp / exp.sum()  # type: ignore[no-any-return]


def ways(record: dict[str, Any]) -> dict[str, np.ndarray]:
    """Every way of ranking the sources for one marker's claim."""
    lexical = np.asarray(record["lexical"])
    attention = np.asarray(record["attention"])
    found: dict[str, np.ndarray] = {
        "lexical": lexical, "likelihood": np.asarray(record["likelihood"]), "attention": attention,
    }
    for weight, temperature in LIKELIHOOD_MIXES:
        found[f"lexical+{weight:g}*likelihood(T={temperature:g})"] = (
            lexical + weight * _softmax(record["likelihood"], temperature)
        )
    share = attention / attention.sum() if attention.sum() else attention
    for weight in ATTENTION_MIXES:
        found[f"lexical+{weight:g}*attention"] = lexical + weight * share
    return found


def summarize(records: list[dict[str, Any]], datasets: Sequence[str]) -> dict[str, Any]:
    """Per dataset, the share of markers whose way's first source is a gold passage."""
    table: dict[str, Any] = {}
    for dataset in datasets:
        mine = [r for r in records if r["dataset"] == dataset]
        if not mine:
            continue
        line = {"markers": len(mine),
                "chosen": round(float(np.mean([r["chosen"] in r["gold"] for r in mine])), 3)}
        for way in ways(mine[0]):
            hits = [int(np.argmax(ways(r)[way])) + 1 in r["gold"] for r in mine]
            line[way] = round(float(np.mean(hits)), 3)
        table[dataset] = line
    return table


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--answers", default="readability_dev_no_refusal.json",
                        help="a readability.py result in benchmarks/results")
    parser.add_argument("--arm", default="no-refusal")
    parser.add_argument("--datasets", nargs="+",
                        default=["paraphrase", "technical", "encyclopedic", "api"])
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    stored = json.loads((RESULTS / args.answers).read_text())
    scorers = Scorers()
    scorers.torch.set_num_threads(args.threads)
    records: list[dict[str, Any]] = []
    for dataset in args.datasets:
        items = {item.id: item for item in load_dataset(dataset)}
        for answer in stored["sets"][dataset][args.arm]["records"]:
            item = items[answer["item"]]
            lexical = LexicalEvidence().bind(item.question, item.sources())
            for chosen, claim, head in cited_claims(answer["text"], len(item.passages)):
                records.append({
                    "dataset": dataset, "item": item.id, "gold": sorted(item.gold_numbers()),
                    "chosen": chosen, "claim": claim,
                    "lexical": lexical.scores(claim),
                    "likelihood": scorers.likelihood(item, claim),
                    "attention": scorers.attention(item, claim, head),
                })
        print(f"{dataset}: {sum(r['dataset'] == dataset for r in records)} markers", flush=True)
    table = summarize(records, args.datasets)
    for way in next(iter(table.values())):
        print(f"{way:36}", "  ".join(f"{d} {line[way]}" for d, line in table.items()))
    out = RESULTS / f"evidence_candidates_{stored['split']}.json"
    out.write_text(json.dumps({"answers": args.answers, "arm": args.arm, "summary": table,
                               "markers": records}, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
