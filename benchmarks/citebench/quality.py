"""Citation quality: every system answers every item, measured against gold labels."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from citebench.data import Item
from citebench.metrics import measure, summarize
from citebench.systems import System
from citeformer import CiteGenerator

Log = Callable[[str], None]


def answer_record(
    gen: CiteGenerator, system: System, item: Item, max_new_tokens: int
) -> dict[str, Any]:
    """Run one system on one item; an exception is recorded, not raised."""
    record: dict[str, Any] = {"system": system.name, "item": item.id, "attack": item.attack}
    if system.evidence is not None:
        system.evidence.drain()
    started = time.perf_counter()
    try:
        answer = system.run(gen, item, max_new_tokens)
    except Exception as error:  # a failure is a result too (e.g. GrammarViolationError)
        record.update(error=f"{type(error).__name__}: {error}",
                      seconds=time.perf_counter() - started)
        return record
    record.update(
        error=None,
        seconds=time.perf_counter() - started,
        text=answer.text,
        finish_reason=answer.finish_reason,
        prompt_tokens=answer.prompt_tokens,
        generated_tokens=answer.generated_tokens,
        **measure(item, answer.text, answer.finish_reason),
    )
    if system.evidence is not None:
        record["evidence_ms"] = system.evidence.drain()
    return record


def run_items(
    gen: CiteGenerator,
    systems: Sequence[System],
    items: Sequence[Item],
    max_new_tokens: int,
    log: Log,
) -> list[dict[str, Any]]:
    """All systems on all items, interleaved per item so that load drift hits every system alike."""
    records = []
    for index, item in enumerate(items, 1):
        for system in systems:
            record = answer_record(gen, system, item, max_new_tokens)
            records.append(record)
            log(_line(index, len(items), record))
    return records


def rescore(records: list[dict[str, Any]], items: Sequence[Item]) -> list[dict[str, Any]]:
    """Recompute the measurements of stored records (after a change to the metrics)."""
    by_key = {(item.id, item.attack): item for item in items}
    return [
        record if record["error"] is not None else {
            **record,
            **measure(by_key[record["item"], record["attack"]], record["text"],
                      record["finish_reason"]),
        }
        for record in records
    ]


def summarize_by_system(
    records: list[dict[str, Any]], systems: Sequence[System]
) -> dict[str, dict[str, Any]]:
    return {s.name: summarize([r for r in records if r["system"] == s.name]) for s in systems}


def _line(index: int, count: int, record: dict[str, Any]) -> str:
    head = f"[{index}/{count}] {record['item']:>4} {record['attack']:<9} {record['system']:<22}"
    if record["error"] is not None:
        return f"{head} ERROR {record['error'][:120]}"
    # A correct, D degenerate (4-gram, cut off, stacked), R repeats, N a number in no source
    flags = "".join(mark for key, mark in (
        ("correct", "A"), ("degenerate", "D"), ("repetition", "R"), ("unsupported_numbers", "N")
    ) if record[key])
    return (
        f"{head} {record['generated_tokens']:>3} tok {record['seconds']:5.1f}s "
        f"markers={record['markers']} fab={record['fabricated']} {flags:<4} {record['text']!r:.110}"
    )
