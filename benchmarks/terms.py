"""What dotted terms cost the REQUIRED grammar: compile time per call and mask time per token.

    python benchmarks/terms.py [--split test]

For every question of the technical set's split (the set where versions, decimals and dotted
names occur), the REQUIRED grammar of its sources is compiled for the embedded model's vocabulary
with the question's dotted terms and without them (``source_terms=False``), and the answer stored
for the ``default`` arm in ``results/readability_<split>_terms.json`` (else
``readability_<split>.json``) is matched token by token under each, timing every token mask. An
answer the grammar without terms refuses (it holds a term) is timed up to that token there.
Writes ``benchmarks/results/terms.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from citebench.data import load_dataset  # noqa: E402
from citebench.metrics import quantiles  # noqa: E402

from citeformer import CiteGenerator, build_request  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--split", choices=("dev", "test"), default="test")
    args = parser.parse_args(argv)

    import torch
    import xgrammar as xgr

    torch.set_num_threads(1)
    gen = CiteGenerator.default(progress=False)
    stored = RESULTS / f"readability_{args.split}_terms.json"
    if not stored.exists():
        stored = RESULTS / f"readability_{args.split}.json"
    answers = {
        r["item"]: r["text"]
        for r in json.loads(stored.read_text())["sets"]["technical"]["default"]["records"]
    }
    compiler = xgr.GrammarCompiler(gen.tokenizer_info, cache_enabled=False)
    bitmask = xgr.allocate_token_bitmask(1, gen.tokenizer_info.vocab_size)
    rows: list[dict[str, Any]] = []
    for item in (i for i in load_dataset("technical") if i.split == args.split):
        row: dict[str, Any] = {"item": item.id}
        for label, terms_on in (("terms", True), ("plain", False)):
            request = build_request(item.question, item.sources(), source_terms=terms_on)
            started = time.perf_counter()
            compiled = compiler.compile_grammar(request.grammar_text(spell_quotes=False))
            row[f"{label}_compile_s"] = time.perf_counter() - started
            matcher = xgr.GrammarMatcher(compiled)
            masks = []
            for token in gen.tokenizer(answers[item.id], add_special_tokens=False).input_ids:
                started = time.perf_counter()
                matcher.fill_next_token_bitmask(bitmask)
                masks.append(time.perf_counter() - started)
                if not matcher.accept_token(token):
                    break
            row[f"{label}_mask_s"] = masks
            if terms_on:
                row["terms"] = len(request.terms)
        rows.append(row)
        print(f"{item.id}: {row['terms']} terms, compile {row['terms_compile_s'] * 1000:.0f} ms "
              f"(without {row['plain_compile_s'] * 1000:.0f} ms)", flush=True)
    summary = {
        "questions": len(rows),
        "with_terms": sum(r["terms"] > 0 for r in rows),
        "terms_per_question": quantiles([r["terms"] for r in rows]),
    }
    for label in ("terms", "plain"):
        masks = [m for r in rows for m in r[f"{label}_mask_s"]]
        summary[label] = {
            "compile_s": quantiles([r[f"{label}_compile_s"] for r in rows]),
            "mask_ms": quantiles([m * 1000 for m in masks]),
            "mask_ms_mean": statistics.fmean(masks) * 1000,
        }
    for label in ("terms", "plain"):
        part = summary[label]
        print(f"{label:6} compile median {part['compile_s']['median'] * 1000:.0f} ms, "
              f"p99 {part['compile_s']['p99'] * 1000:.0f} ms; mask median "
              f"{part['mask_ms']['median']:.3f} ms, p99 {part['mask_ms']['p99']:.3f} ms, "
              f"mean {part['mask_ms_mean']:.3f} ms")
    out = RESULTS / "terms.json"
    out.write_text(json.dumps({"split": args.split, "answers": str(stored.name),
                               "summary": summary, "rows": rows}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
