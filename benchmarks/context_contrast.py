"""Context-aware decoding (Shi et al. 2023) tried under the default REQUIRED answer.

    python benchmarks/context_contrast.py --split test --alphas 0.5 --threads 2
    python benchmarks/context_contrast.py --split dev --alphas 0 0.5 --limit 8 --out speed  # cost

Each step, the model's logits with the sources ``z_ctx`` are contrasted with its logits for the
same question and answer so far without them ``z_plain``: ``(1 + alpha) * z_ctx - alpha *
z_plain``, before the grammar's mask and the levers, so the guarantee is untouched and what
the sources make likelier gains over what the model would say anyway. The plain rows are one
more left-padded batch with their own key-value cache, run beside ``generate``'s: the cost is
about one more forward pass per token. Every other setting is the default (``readability.py``'s
``default`` arm, whose stored answers on the same split are the baseline row).

For each set: precision, correctness and the readability columns, and tokens per second (every
token over the wall time, batches of 8; alpha 0
runs without the contrast: the baseline of the same process). Results go to
``benchmarks/results/context_contrast_<split>.json`` (``--out`` adds a suffix).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from citebench.data import load_dataset  # noqa: E402
from citebench.metrics import rate_text  # noqa: E402
from readability import COLUMNS, RESULTS, _answer  # noqa: E402

from citeformer import CiteGenerator  # noqa: E402
from citeformer.decoding import engine as engine_module  # noqa: E402
from citeformer.prompt import build_messages, render_prompt  # noqa: E402


class ContextContrast:
    """A logits processor: ``(1 + alpha) * scores - alpha * plain``, ``plain`` being the
    model's logits for the rows' prompts without their sources, fed the same answer tokens."""

    def __init__(self, model: Any, prompts: list[list[int]], alpha: float, pad_id: int) -> None:
        width = max(len(p) for p in prompts)
        self._ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
        self._mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, prompt in enumerate(prompts):
            self._ids[i, width - len(prompt):] = torch.tensor(prompt)
            self._mask[i, width - len(prompt):] = 1
        self._model, self._alpha, self._past = model, alpha, None

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        device = self._model.device
        if self._past is None:
            ids = self._ids
        else:
            ids = input_ids[:, -1:].cpu()
            self._mask = torch.cat([self._mask, torch.ones((len(ids), 1), dtype=torch.long)], 1)
        positions = (self._mask.cumsum(-1) - 1).clamp(min=0)[:, -ids.shape[1]:]
        out = self._model(
            input_ids=ids.to(device), attention_mask=self._mask.to(device),
            position_ids=positions.to(device), cache=self._past, use_cache=True,
        )
        self._past = out.cache
        plain = out.logits[:, -1, : scores.shape[1]].to(scores.dtype)
        return (1 + self._alpha) * scores - self._alpha * plain


_rows = threading.local()


def contrast_with(gen: CiteGenerator, alpha: float) -> None:
    """Make ``gen``'s transformers engine run every batch with ``ContextContrast(alpha)`` first."""
    engine = gen.engine
    model, tokenizer = engine.model, gen.tokenizer
    original_run = engine_module.TransformersEngine.run
    original_generate = model.generate

    def run(self: Any, rows: Any, **kwargs: Any) -> Any:
        _rows.value = rows
        return original_run(self, rows, **kwargs)

    def generate(**kwargs: Any) -> Any:
        prompts = []
        for row in _rows.value:
            request = row.request
            messages = build_messages(request.question, [], request.policy, request.instructions)
            prompts.append(tokenizer(render_prompt(messages, tokenizer),
                                     add_special_tokens=False).input_ids)
        processor = ContextContrast(model, prompts, alpha, engine.pad_token_id)
        kwargs["logits_processor"].insert(0, processor)
        return original_generate(**kwargs)

    engine.run = run.__get__(engine)
    model.generate = generate


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--split", choices=("dev", "test"), default="test")
    parser.add_argument("--alphas", nargs="+", type=float, default=[0.5])
    parser.add_argument("--datasets", nargs="+", default=["technical", "encyclopedic", "api"])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--out", default=None, help="a suffix for the results file")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    suffix = f"_{args.out}" if args.out else ""
    out = RESULTS / f"context_contrast_{args.split}{suffix}.json"
    results: dict[str, Any] = {"split": args.split, "policy": "required", "max_new_tokens": 160,
                               "sets": {}}
    answering = argparse.Namespace(policy="required", max_new_tokens=160, batch_size=8)
    for alpha in args.alphas:
        gen = CiteGenerator.default(progress=False)
        if alpha:
            contrast_with(gen, alpha)  # alpha 0: the defaults alone, the speed baseline
        results["dtype"] = str(gen.model.dtype)
        for dataset in args.datasets:
            items = [i for i in load_dataset(dataset) if i.split == args.split][: args.limit]
            records, summary, settings = _answer(gen, items, "default", answering)
            arm = f"contrast-{alpha:g}"
            results["sets"].setdefault(dataset, {})[arm] = {
                "settings": {**settings, "context_contrast": alpha},
                "summary": summary, "records": records,
            }
            # Every token over the wall time (a record's seconds: its batch's over its rows).
            throughput = sum(r["generated_tokens"] for r in records) / max(
                sum(r["seconds"] for r in records), 1e-9)
            results["sets"][dataset][arm]["tokens_per_second"] = round(throughput, 2)
            line = "  ".join(f"{label} {rate_text(summary[key])}" for key, label in COLUMNS)
            print(f"{dataset:12} {arm:14} {line}  tok/s {throughput:.1f}", flush=True)
            RESULTS.mkdir(exist_ok=True)
            out.write_text(json.dumps(results, indent=1, default=str))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
