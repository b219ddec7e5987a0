"""An answer that stops once it has answered, read on stored answers before any lever is built.

Greedy decoding writes the same text up to a point whatever is done after it, so an answer that
a lever ends right after one of its cited sentences (the end tokens raised there until they win)
is the stored answer cut there. For each stored answer (``--answers``, a ``readability.py``
result, ``--arm``), each rule says after which cited sentence the answer would end, and the cut
answers are measured with the benchmark's metrics beside the answers as written:

- ``first``: after the first cited sentence;
- ``new-words-K``: after the first cited sentence whose claim holds at least K content words the
  sources hold and the question does not (it has said something the sources say, not only
  restated the question);
- ``restated``: before the first sentence whose content words are mostly an earlier sentence's
  (Jaccard ``RESTATED`` or more): the same claim in other words is not written.

Writes ``results/answered_stop_<split>.json``::

    python benchmarks/answered_stop.py --answers readability_dev_no_refusal.json
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from citebench.data import Item, load_dataset, stored_answers  # noqa: E402
from citebench.metrics import measure, rate_text, summarize  # noqa: E402

from citeformer.evidence.scoring import claim_of, content_words  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
RESTATED = 0.6
NEW_WORDS = (1, 2, 3)
_CITED_END = re.compile(r"(?:\[\d+\])+[.!?](?=\s|$)")
"""A cited sentence's end: its cite-group and terminator."""
_GROUP = re.compile(r"\s*(?:\[\d+\])+$")

Rule = Callable[[Item, list[tuple[int, str]]], int | None]
"""Where a rule ends an answer: the index of the last sentence kept, or ``None`` for none cut."""


def cited_sentences(text: str) -> list[tuple[int, str]]:
    """Each cited sentence of ``text``: where it ends (after its terminator) and its claim."""
    found = []
    for match in _CITED_END.finditer(text):
        head = text[: match.end() - 1]
        found.append((match.end(), claim_of(_GROUP.sub("", head))))
    return found


def first(item: Item, sentences: list[tuple[int, str]]) -> int | None:
    return 0 if sentences else None


def new_words(count: int) -> Rule:
    def rule(item: Item, sentences: list[tuple[int, str]]) -> int | None:
        asked = set(content_words(item.question))
        held = set(content_words(" ".join(f"{p.title or ''} {p.text}" for p in item.passages)))
        for k, (_, claim) in enumerate(sentences):
            if len((set(content_words(claim)) - asked) & held) >= count:
                return k
        return None
    return rule


def restated(item: Item, sentences: list[tuple[int, str]]) -> int | None:
    seen: list[set[str]] = []
    for k, (_, claim) in enumerate(sentences):
        words = set(content_words(claim))
        if k and any(words and len(words & s) / len(words | s) >= RESTATED for s in seen):
            return k - 1
        seen.append(words)
    return None


RULES: dict[str, Rule] = {
    "first": first, **{f"new-words-{k}": new_words(k) for k in NEW_WORDS}, "restated": restated,
}


def cut(item: Item, text: str, rule: Rule) -> str:
    """``text`` ended where ``rule`` says (unchanged where it says nothing)."""
    sentences = cited_sentences(text)
    last = rule(item, sentences)
    return text if last is None else text[: sentences[last][0]]


def measured(item: Item, answer: dict[str, Any], text: str) -> dict[str, Any]:
    reason = "stop" if text != answer["text"] or not answer.get("cut_off") else "length"
    record = measure(item, text, reason)
    record.update(item=item.id, text=text, error=None, generated_tokens=0, seconds=0.0,
                  abstained=bool(answer.get("abstained")))
    return record


def main(argv: list[str] | None = None) -> None:
    stored, named, arm = stored_answers(RESULTS, argv, __doc__ or "")
    table: dict[str, Any] = {}
    for dataset, arms in stored["sets"].items():
        items = {item.id: item for item in load_dataset(dataset)}
        answers = arms[arm]["records"]
        table[dataset] = {}
        for name, rule in {"as written": None, **RULES}.items():
            records = []
            for answer in answers:
                item = items[answer["item"]]
                kept = answer["abstained"] or rule is None
                records.append(measured(item, answer, answer["text"] if kept else
                                        cut(item, answer["text"], rule)))
            summary = summarize(records)
            line = {key: summary[key] for key in (
                "precision", "correctness", "unsupported_per_answer", "sentences_per_answer",
                "markers", "finished")}
            table[dataset][name] = line
            print(f"{dataset:12} {name:12} precision {rate_text(line['precision'])}  correct "
                  f"{rate_text(line['correctness'])}  unsupported/answer "
                  f"{line['unsupported_per_answer']}  sentences/answer "
                  f"{line['sentences_per_answer']}", flush=True)
    out = RESULTS / f"answered_stop_{stored.get('split', 'dev')}.json"
    out.write_text(json.dumps({"answers": named, "arm": arm,
                               "restated": RESTATED, "sets": table}, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
