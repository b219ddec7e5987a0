"""Many questions across machines: Ray Data over vLLM with citeformer's steering processor.

    RAY=~/.cache/citeformer/ray-venv/bin/python     # a venv with vLLM, ray[data] and citeformer
    $RAY benchmarks/ray_data.py --questions 16       # local mode on this machine

Each row of the dataset is one question with its sources (as JSON); ``map_batches`` hands batches
to actors that each hold a ``VLLMGenerator`` (``vllm.LLM`` with ``SteeringProcessor`` loaded), and
each answer comes back as ``CitedAnswer.to_dict()``. On a cluster the same code runs one actor
per GPU (``num_gpus=1``, ``concurrency=<replicas>``) on a model of your own
(``--model``, passed to ``VLLMGenerator.from_pretrained``). Every answer's markers are checked
here; the run writes ``benchmarks/results/ray_data.json`` (throughput, every answer).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from citebench.data import load_dataset  # noqa: E402

from citeformer import CitedAnswer, Source, build_request, scan_markers  # noqa: E402

RESULTS = ROOT / "results" / "ray_data.json"


class Answerer:
    """One Ray actor: a steered ``vllm.LLM``, answering a batch of rows at a time."""

    def __init__(self, model: str | None, max_new_tokens: int) -> None:
        from citeformer.vllm import VLLMGenerator

        settings = {"enforce_eager": True, "distributed_executor_backend": "uni"}
        self.gen = (VLLMGenerator.default(**settings) if model is None
                    else VLLMGenerator.from_pretrained(model, **settings))
        self.max_new_tokens = max_new_tokens

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        requests = [
            build_request(question, [Source(s["text"], title=s["title"])
                                     for s in json.loads(sources)],
                          max_new_tokens=self.max_new_tokens)
            for question, sources in zip(batch["question"], batch["sources"], strict=True)
        ]
        answers = self.gen.answer_batch(requests)
        return {"id": list(batch["id"]),
                "answer": [json.dumps(answer.to_dict()) for answer in answers]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--questions", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--model", default=None, help="default: the embedded SmolLM2-135M")
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    import ray

    items = load_dataset("technical")[: args.questions]
    rows = [{"id": item.id, "question": item.question,
             "sources": json.dumps([{"text": p.text, "title": p.title} for p in item.passages])}
            for item in items]
    ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False)
    started = time.perf_counter()
    dataset = ray.data.from_items(rows).map_batches(
        Answerer, fn_constructor_args=(args.model, args.max_new_tokens),
        batch_size=args.batch_size, concurrency=1, num_cpus=args.cpus,
    )
    done = dataset.take_all()
    seconds = time.perf_counter() - started
    ray.shutdown()

    by_id = {item.id: item for item in items}
    answers = {row["id"]: CitedAnswer.from_dict(json.loads(row["answer"])) for row in done}
    assert set(answers) == set(by_id), "a question came back without its answer"
    bad = [i for i, a in answers.items() if scan_markers(a.text, len(by_id[i].passages)).fabricated]
    tokens = sum(a.generated_tokens for a in answers.values())
    print(f"{len(answers)} answers through Ray Data in {seconds:.0f}s ({tokens} tokens, "
          f"{tokens / seconds:.1f} tokens/s, model load included); markers out of range or "
          f"malformed in {len(bad)} answers")
    args.out.parent.mkdir(exist_ok=True)
    args.out.write_text(json.dumps({
        "questions": len(answers), "seconds": seconds, "generated_tokens": tokens,
        "answers_with_fabricated_markers": len(bad),
        "answers": {i: a.text for i, a in sorted(answers.items())},
    }, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
