"""Whether a change alters the steering itself: each step's steered logits, compared bit for bit.

    python benchmarks/same_steering.py record steps.pt
    PYTHONPATH=<checkout before>/core python benchmarks/same_steering.py replay steps.pt before.json
    python benchmarks/same_steering.py replay steps.pt after.json
    python benchmarks/same_steering.py compare before.json after.json

``record`` decodes held-out questions of the technical and paraphrase sets with the embedded
model (float32, greedy, one thread) under three policies, two answers alone and four in a batch
for each, and stores every step's last tokens and unsteered logits as the logits processor was
handed them. ``replay`` steers copies of those logits step by step with the checkout's logits
processor, the rows advanced by the recorded tokens, and writes a hash of each step's steered
logits. ``compare`` counts the steps whose hashes differ and exits 1 if any does. The same
hash at every step means the same steered logits, so the same tokens from any sampler: the
greedy answers are identical without decoding them again, in minutes (``same_answers.py``
decodes every stored question, about an hour on two cores). Batches of one to four rows are
where the steering weighs scores in plain floats, more in arrays. What happens before the
logits processor (the prompt, the model's dtype) is not replayed: ``same_answers.py`` checks
that.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from citebench.data import load_dataset  # noqa: E402
from steering_speed import recorded_steps  # noqa: E402

from citeformer import CiteGenerator, Policy, build_request  # noqa: E402
from citeformer.decoding.engine import TransformersEngine  # noqa: E402
from citeformer.decoding.hf import SteeringLogitsProcessor  # noqa: E402

SETS = ("technical", "paraphrase")
POLICIES = ("required", "quotes_only", "auto")
BATCHES = ((1, 0), (1, 5), (4, 1))
"""(rows, first held-out question) of each case."""
MAX_NEW_TOKENS = 80


def cases() -> list[tuple[str, str, list[Any]]]:
    """(set, policy, items) of every decode recorded and replayed, in order."""
    found = []
    for name in SETS:
        items = [item for item in load_dataset(name) if item.split != "dev"]
        for policy in POLICIES:
            for rows, first in BATCHES:
                found.append((name, policy, items[first:first + rows]))
    return found


def engine() -> TransformersEngine:
    torch.set_num_threads(1)
    gen = CiteGenerator.default(progress=False, dtype="float32")
    return TransformersEngine(gen.model, gen.tokenizer, work_ahead=False)


def prepared(decoder: TransformersEngine, policy: str, items: list[Any]) -> list[Any]:
    return [
        decoder.prepare(build_request(item.question, item.sources(), Policy.coerce(policy),
                                      max_new_tokens=MAX_NEW_TOKENS))
        for item in items
    ]


def record(path: Path) -> None:
    decoder = engine()
    steps = []
    for name, policy, items in cases():
        steps.append(recorded_steps(decoder, prepared(decoder, policy, items)))
        print(f"{name} {policy}, {len(items)} rows: {len(steps[-1])} steps", flush=True)
    torch.save(steps, path)


def replay(steps_path: Path, out: Path) -> None:
    decoder = engine()
    recorded = torch.load(steps_path)
    found = []
    for (name, policy, items), steps in zip(cases(), recorded, strict=True):
        case = steered_hashes(decoder, prepared(decoder, policy, items), steps)
        found.append({"set": name, "policy": policy, "rows": len(items), "steps": case})
        print(f"{name} {policy}, {len(items)} rows: {len(case)} steps replayed", flush=True)
    out.write_text(json.dumps(found, indent=1))


def steered_hashes(
    decoder: TransformersEngine, rows: list[Any], steps: list[tuple[torch.Tensor, torch.Tensor]]
) -> list[str]:
    """A hash of each recorded step's logits once ``decoder``'s logits processor steered them."""
    processor = SteeringLogitsProcessor(
        [decoder.steering(row) for row in rows], vocab_size=decoder.tokenizer_info.vocab_size,
        stop_token_ids=decoder.stop_token_ids, work_ahead=False,
    )
    with torch.inference_mode():
        return [hashlib.sha1(processor(last, logits.clone()).numpy().tobytes()).hexdigest()
                for last, logits in steps]


def compare(before: Path, after: Path) -> int:
    old, new = (json.loads(path.read_text()) for path in (before, after))
    steps = differ = 0
    for ours, theirs in zip(old, new, strict=True):
        pairs = list(zip(ours["steps"], theirs["steps"], strict=True))
        changed = [k for k, (a, b) in enumerate(pairs) if a != b]
        steps += len(pairs)
        differ += len(changed)
        if changed:
            print(f"{ours['set']} {ours['policy']}, {ours['rows']} rows: steps {changed} differ")
    print(f"{steps - differ} of {steps} steered steps identical, {differ} differ")
    return 1 if differ else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("record").add_argument("steps", type=Path)
    rep = commands.add_parser("replay")
    rep.add_argument("steps", type=Path)
    rep.add_argument("out", type=Path)
    cmp = commands.add_parser("compare")
    cmp.add_argument("before", type=Path)
    cmp.add_argument("after", type=Path)
    args = parser.parse_args(argv)
    if args.command == "record":
        record(args.steps)
    elif args.command == "replay":
        replay(args.steps, args.out)
    else:
        return compare(args.before, args.after)
    return 0


if __name__ == "__main__":
    sys.exit(main())
