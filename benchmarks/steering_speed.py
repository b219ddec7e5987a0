"""What the steering adds to a decode step, beside a model fast enough to show it.

    python benchmarks/steering_speed.py --label after [--sections steps end_to_end memory]

``steps``: a random-weight two-layer Llama with the embedded model's widths and real tokenizer
(a stand-in for a GPU step: its forward pass is a few milliseconds where the 30-layer model's is
hundreds) decodes greedy answers to the technical set's held-out questions under REQUIRED with
the default levers, at batch 1, 8 and 32. Per step: the steering's own wall time (the logits
processor's, median and p99) and the whole step's, steered and plain (``constrained=False``);
added = steered step - plain step.

``lengths``: the same stand-in, one 512-token greedy answer per row (``end_bias=0``, so the
random model's answers run that long) at batch 1, 8, 32 and 64: the steering's wall time per
step over the steps 1-16, 113-128 and 497-512 of the answers, that is what answers of 16, 128
and 512 tokens cost a step at their end. ``--family llama-bpe`` (or ``qwen2``) puts a stand-in on
that vocabulary (Llama 3's 128k tokens, from the vocab-only GGUFs the tests read) and runs
batch 32, steered and plain, 128 tokens.

``end_to_end``: 8 technical questions with the longest prompts (560-1,000 tokens), answered with
the default ``generate_batch`` (the default dtype, the steering) and by a plain float32
transformers ``generate`` batch of the same model and prompts (no grammar, no levers), 100 new
tokens, best of 2.

``grammar``: the grammar's mask alone, per row and step, one thread, on SmolLM2's vocabulary and
``--family``'s: the ``REQUIRED`` grammar as a serving engine is sent it (words, sentences and
dotted terms' edges bounded in the grammar) against the one citeformer's own matcher fills
(``local_grammar``, with ``WordBound`` bounding in the bitmask what the grammar leaves out), fed
the stored greedy answers of every labeled set's held-out questions
(``results/same_answers.json``) token by token; split by whether the request spells dotted terms.

``shapes``: what the shape of the sentence's words rule costs xgrammar's fill, one row, one
thread, on SmolLM2's vocabulary and ``--family``'s: a sentence of words written as today's
grammar writes it (``word (" " word)*``, the word a run of the word characters) against one run
over characters that may each follow a space (``(char | " " char)+``, the same strings), and
bounded to 24 words, fed a 20-word prose sentence token by token.

``ahead``: the stand-in of ``steps`` steered with its step's work that reads no logits made in a
worker thread during the forward pass (``work_ahead=True``) and made in the step
(``work_ahead=False``), the two in turn ``--reps`` times at batch 1, 8, 32 and 64 on ``--device``:
per arm, the median step and the median steering wall time (what the step waits for) of each run,
and the best of those; after each pair, the same batch unsteered for as many steps as the steered
one took (``plain``), and each arm's best step less plain's best (``added_ms``); whether both arms
wrote the same tokens. ``ahead_family``: the same at
batch 32 on ``--family``'s stand-in.

``replay``: the stand-in's steps at batch 1, 8 and 32 (in the step, REQUIRED, 100 new tokens)
recorded, each step's tokens and logits; then the steering of the same steps replayed on copies
of those logits ``--reps`` times, and checked to choose the recorded tokens. Replayed in the step
(the logits processor's time) and ahead (only ``Steering.apply`` timed: the advance and
``prepare`` made before, as the work ahead is), each in two ways: ``cold``, the stand-in's output
layer run before each step, as its forward pass does, which reads its weights through the caches
(113 MB on SmolLM2's vocabulary, 295 MB on Llama 3's); ``warm``, nothing run between the
steps, as beside a model on an accelerator, whose step leaves the host's caches as they were.
Per arm, the best of the runs' median steering per step.
``replay_lengths``: the same at batch 1 and 32 over ``lengths``' 512-token answers, per window;
``replay_family``: at batch 32 on ``--family``'s stand-in. ``cold_ops``: single operations of
the kinds the steering runs (a tensor's numpy view, a gather of logits through numpy and torch,
xgrammar's CPU bitmask kernel), each timed 150 times right after the output layer and after
nothing, median µs.
``replay_floor``: ``replay``'s ahead arms at batch 1 (or ``--batches``), cold and warm, beside the
same replay with the edits' write left out (``StepEdits.apply`` a no-op) and with both it and the
bitmask's write left out (``MaskPlan.apply`` too): what the rest of ``apply`` (the reads of the
scores, the levers that read them, the hand-over of the edits) costs alone, a floor no faster
edit or mask can go below. The arms with writes left out steer wrongly and are not checked.

``memory``: peak RSS of a child process answering a batch of 32 technical questions with the
embedded model (REQUIRED, 100 new tokens), beside the same process before the batch.

Each section merges its numbers under ``--label`` into benchmarks/results/steering_speed.json,
so a run before a change and one after sit side by side. Torch runs on ``--threads`` threads.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from unittest import mock

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE)]

import torch  # noqa: E402
from citebench.data import Item, load_dataset  # noqa: E402
from citebench.metrics import quantiles  # noqa: E402

from citeformer import CiteGenerator, build_request  # noqa: E402
from citeformer.decoding.engine import TransformersEngine, prompt_token_ids  # noqa: E402
from citeformer.decoding.hf import SteeringLogitsProcessor  # noqa: E402
from citeformer.decoding.steering import Steering, advance_all  # noqa: E402

OUT = HERE / "results" / "steering_speed.json"
SECTIONS = (
    "steps", "lengths", "family", "end_to_end", "memory", "grammar", "shapes", "ahead",
    "ahead_family", "replay", "replay_lengths", "replay_family", "cold_ops", "replay_floor",
)
WINDOWS = {"16": (0, 16), "128": (112, 128), "512": (496, 512)}
"""Steps of an answer whose steering time stands for an answer of that many tokens."""
ANSWERS = HERE / "results" / "same_answers.json"


def held_out(count: int) -> list[Item]:
    items = [i for i in load_dataset("technical") if i.split != "dev"]
    return (items * (count // len(items) + 1))[:count]


def stand_in(tokenizer: Any, config: Any) -> Any:
    """A random two-layer Llama with the widths of ``config``."""
    from transformers import LlamaConfig, LlamaForCausalLM

    small = LlamaConfig(**{**config.to_dict(), "num_hidden_layers": 2})
    torch.manual_seed(0)
    return LlamaForCausalLM(small).eval()


def step_times(
    engine: TransformersEngine, items: list[Item], tokens: int, **options: Any
) -> dict[str, Any]:
    """Per-step wall times of one batch, steered and plain, over ``items``."""
    result: dict[str, Any] = {}
    for arm in ("plain", "steered"):
        rows = [
            engine.prepare(build_request(
                item.question, item.sources(), max_new_tokens=tokens,
                constrained=arm == "steered", **options,
            ))
            for item in items
        ]
        engine.run(rows[:1])  # warm the kernels
        decoded, steps = timed_steps(engine, rows)
        result[arm] = {
            "step_ms": _ms(steps),
            "steering_ms": _ms(decoded.step_seconds[1:]),
            "tokens": sum(len(ids) for ids in decoded.ids),
        }
    steps = {arm: result[arm]["step_ms"]["median"] for arm in ("plain", "steered")}
    result["added_ms"] = steps["steered"] - steps["plain"]
    return result


def timed_steps(engine: TransformersEngine, rows: list[Any]) -> tuple[Any, list[float]]:
    """``rows`` decoded as one batch, and the wall time of each decode step (not the prompt)."""
    stamps: list[float] = []
    decoded = engine.run(rows, streamer=_Clock(stamps))
    return decoded, [b - a for a, b in zip(stamps[1:], stamps[2:], strict=False)]


class _Clock:
    """A streamer that notes the time of each step (the prompt's put, then one per token)."""

    def __init__(self, stamps: list[float]) -> None:
        self._stamps = stamps

    def put(self, value: Any) -> None:
        self._stamps.append(time.perf_counter())

    def end(self) -> None:
        pass


def _ms(seconds: list[float]) -> dict[str, Any]:
    found = quantiles([s * 1000 for s in seconds])
    return {key: found[key] for key in ("n", "median", "p99") if key in found}


def steps_section(tokens: int) -> dict[str, Any]:
    gen = CiteGenerator.default(progress=False, dtype="float32")
    model = stand_in(gen.tokenizer, gen.model.config)
    engine = TransformersEngine(model, gen.tokenizer)
    found: dict[str, Any] = {}
    for batch in (1, 8, 32, 64):
        found[str(batch)] = step_times(engine, held_out(batch), tokens)
        line = found[str(batch)]
        print(f"batch {batch:>2}: steering {line['steered']['steering_ms']['median']:.2f} ms/step "
              f"(p99 {line['steered']['steering_ms']['p99']:.2f}); step plain "
              f"{line['plain']['step_ms']['median']:.2f}, steered "
              f"{line['steered']['step_ms']['median']:.2f}, added {line['added_ms']:.2f} ms",
              flush=True)
    return found


def ahead_section(
    tokens: int, device: str, reps: int, family: str | None = None,
    batches: Sequence[int] | None = None,
) -> dict[str, Any]:
    tokenizer, model = stand_in_of(family)
    if batches is None:
        batches = (1, 8, 32, 64) if family is None else (32,)
    model = model.to(device)
    inline = TransformersEngine(model, tokenizer, work_ahead=False)
    engines = {
        "inline": inline, "ahead": TransformersEngine(model, kit=inline.kit, work_ahead=True),
    }
    found: dict[str, Any] = {"device": device, "vocab": len(tokenizer)}
    for batch in batches:
        items = held_out(batch)
        rows = [inline.prepare(build_request(item.question, item.sources(), max_new_tokens=tokens))
                for item in items]
        inline.run(rows[:1])  # warm the kernels
        runs: dict[str, list[tuple[float, float]]] = {arm: [] for arm in (*engines, "plain")}
        tokens_of: dict[str, list[list[int]]] = {}
        plain: list[Any] = []
        for _ in range(reps):
            for arm, engine in engines.items():
                decoded, steps = timed_steps(engine, rows)
                runs[arm].append((_ms(steps)["median"], _ms(decoded.step_seconds[1:])["median"]))
                tokens_of[arm] = decoded.ids
            if not plain:  # unsteered, as many steps as the steered batch took
                longest = max(len(ids) for ids in tokens_of["inline"])
                plain = [inline.prepare(build_request(
                    item.question, item.sources(), max_new_tokens=longest, constrained=False,
                )) for item in items]
            _, steps = timed_steps(inline, plain)
            runs["plain"].append((_ms(steps)["median"], 0.0))
        line: dict[str, Any] = {
            arm: {
                "step_ms": [step for step, _ in found_runs],
                "steering_ms": [steering for _, steering in found_runs],
                "best_step_ms": min(step for step, _ in found_runs),
                "best_steering_ms": min(steering for _, steering in found_runs),
            }
            for arm, found_runs in runs.items()
        }
        line["same_tokens"] = tokens_of["inline"] == tokens_of["ahead"]
        line["saved_ms"] = line["inline"]["best_step_ms"] - line["ahead"]["best_step_ms"]
        plain_ms = line["plain"]["best_step_ms"]
        for arm in engines:
            line[arm]["added_ms"] = line[arm]["best_step_ms"] - plain_ms
        found[str(batch)] = line
        print(f"batch {batch:>2}: best step plain {plain_ms:.2f} ms, inline "
              f"{line['inline']['best_step_ms']:.2f} (+{line['inline']['added_ms']:.2f}), ahead "
              f"{line['ahead']['best_step_ms']:.2f} (+{line['ahead']['added_ms']:.2f}); "
              f"steering waited for {line['inline']['best_steering_ms']:.2f} and "
              f"{line['ahead']['best_steering_ms']:.2f}; same tokens {line['same_tokens']}",
              flush=True)
    return found


def replay_section(
    tokens: int,
    reps: int,
    batches: Sequence[int] | None,
    *,
    long: bool = False,
    family: str | None = None,
) -> dict[str, Any]:
    from citeformer.readability import Readability

    tokenizer, model = stand_in_of(family)
    engine = TransformersEngine(model, tokenizer, work_ahead=False)
    options: dict[str, Any] = (
        {"max_new_tokens": 512, "readability": Readability(end_bias=0.0)} if long
        else {"max_new_tokens": tokens}
    )
    found: dict[str, Any] = {"vocab": len(tokenizer)}
    for batch in batches or ((1, 32) if long else (32,) if family else (1, 8, 32)):
        rows, steps, arms = _recording(engine, model, batch, options)
        line: dict[str, Any] = {"steps": len(steps)}
        for work in ("in_step", "ahead"):
            for caches, between in arms.items():
                runs, same = [], True
                for _ in range(reps):
                    seconds, chose = replayed(engine, rows, steps, between, ahead=work == "ahead")
                    runs.append(seconds)
                    same &= chose
                line[f"{work}_{caches}"] = _replay_line(runs, long) | {
                    "chose_the_recorded_tokens": same
                }
        found[str(batch)] = line
        _print_replay(batch, line, long)
    return found


def _recording(
    engine: TransformersEngine, model: Any, batch: int, options: dict[str, Any]
) -> tuple[list[Any], list[tuple[torch.Tensor, torch.Tensor]], dict[str, Any]]:
    """``batch`` held-out rows with ``options``, their steps recorded, and what runs between two
    replayed steps: the output layer (``cold``) or nothing (``warm``)."""
    rows = [engine.prepare(build_request(item.question, item.sources(), **options))
            for item in held_out(batch)]
    head = model.get_output_embeddings()
    hidden = torch.randn(batch, 1, model.config.hidden_size)
    return rows, recorded_steps(engine, rows), {"cold": lambda: head(hidden), "warm": lambda: None}


def replay_floor_section(reps: int, batches: Sequence[int] | None) -> dict[str, Any]:
    tokenizer, model = stand_in_of(None)
    engine = TransformersEngine(model, tokenizer, work_ahead=False)
    found: dict[str, Any] = {}
    for batch in batches or (1,):
        rows, steps, arms = _recording(engine, model, batch, {"max_new_tokens": 100})
        seconds, chose = floor_runs(engine, rows, steps, arms, reps)
        same = all(chose[f"full, {caches}"] for caches in arms)
        line: dict[str, Any] = {"steps": len(steps), "full_chose_the_recorded_tokens": same}
        for name, runs in seconds.items():
            medians = [_ms(run)["median"] for run in runs]
            means = [sum(run) / len(run) * 1e3 for run in runs]
            line[name] = {"median_ms": medians, "best_median_ms": min(medians),
                          "mean_ms": means, "best_mean_ms": min(means)}
            print(f"batch {batch:>2}, {name}: the step waits {min(medians):.2f} ms (best median), "
                  f"{min(means):.2f} (best mean)", flush=True)
        print(f"batch {batch:>2}: the full replay chose the recorded tokens: {same}", flush=True)
        found[str(batch)] = line
    return found


def floor_runs(
    engine: TransformersEngine,
    rows: list[Any],
    steps: list[tuple[torch.Tensor, torch.Tensor]],
    between: dict[str, Any],
    reps: int,
) -> tuple[dict[str, list[list[float]]], dict[str, bool]]:
    """``replayed`` ahead, whole and with writes left out, for each of ``between``'s ways, the
    arms in turn ``reps`` times: each arm's seconds per run, and whether all its runs chose the
    recorded tokens (the arms with writes left out are not expected to)."""
    from citeformer.decoding.edits import StepEdits
    from citeformer.decoding.masks import MaskPlan

    left_out = {
        "full": [],
        "without the edits' write": [mock.patch.object(StepEdits, "apply", lambda *a, **k: None)],
        "without the edits' and the mask's writes": [
            mock.patch.object(StepEdits, "apply", lambda *a, **k: None),
            mock.patch.object(MaskPlan, "apply", lambda *a, **k: {}),
        ],
    }
    seconds: dict[str, list[list[float]]] = {}
    chose: dict[str, bool] = {}
    for _ in range(reps):  # the arms in turn, so the machine's state weighs on each alike
        for arm, patches in left_out.items():
            for caches, run_between in between.items():
                for patch in patches:
                    patch.start()
                try:
                    run, same = replayed(engine, rows, steps, run_between, ahead=True)
                finally:
                    for patch in patches:
                        patch.stop()
                name = f"{arm}, {caches}"
                seconds.setdefault(name, []).append(run)
                chose[name] = chose.get(name, True) and same
    return seconds, chose


def cold_ops_section() -> dict[str, Any]:
    """Single operations of the steering's kinds, timed right after the stand-in's output layer
    read its weights (``cold``) and after nothing (``warm``): median µs of 150 calls."""
    import numpy as np
    import xgrammar as xgr

    gen = CiteGenerator.default(progress=False, dtype="float32")
    model = stand_in(gen.tokenizer, gen.model.config)
    head = model.get_output_embeddings()
    hidden = torch.randn(1, 1, model.config.hidden_size)
    logits = torch.randn(1, model.config.vocab_size)
    host = logits.numpy()
    ids = np.arange(0, model.config.vocab_size, 400)
    rows = np.zeros_like(ids)
    bitmask = xgr.allocate_token_bitmask(1, model.config.vocab_size)
    bitmask[0, 5] = 0
    ops = {
        "torch Tensor.numpy()": lambda: logits.detach().numpy(),
        f"numpy gather of {len(ids)} logits": lambda: host[rows, ids],
        f"torch indexed read of {len(ids)} logits": lambda: logits[torch.from_numpy(rows),
                                                                   torch.from_numpy(ids)],
        "xgrammar's CPU bitmask kernel, one row": lambda: xgr.apply_token_bitmask_inplace(
            logits, bitmask, indices=[0]),
    }
    found: dict[str, Any] = {}
    with torch.inference_mode():
        for name, op in ops.items():
            line = {}
            for caches in ("cold", "warm"):
                seconds = []
                for _ in range(150):
                    if caches == "cold":
                        head(hidden)
                    started = time.perf_counter()
                    op()
                    seconds.append(time.perf_counter() - started)
                line[caches] = _us(seconds)
            found[name] = line
            print(f"{name}: {line['cold']['median']:.1f} µs cold, {line['warm']['median']:.1f} "
                  "warm", flush=True)
    return found


def _replay_line(runs: list[list[float]], long: bool) -> dict[str, Any]:
    """Each run's median steering per step (per window of ``WINDOWS`` if ``long``), and the best."""
    if not long:
        medians = [_ms(seconds)["median"] for seconds in runs]
        return {"steering_ms": medians, "best_steering_ms": min(medians)}
    windows = {name: [_ms(seconds[a:b])["median"] for seconds in runs]
               for name, (a, b) in WINDOWS.items()}
    return {"steering_ms": windows,
            "best_steering_ms": {name: min(found) for name, found in windows.items()}}


def _print_replay(batch: int, line: dict[str, Any], long: bool) -> None:
    arms = [arm for arm in line if arm != "steps"]
    chose = all(line[arm]["chose_the_recorded_tokens"] for arm in arms)
    if not long:
        best = {arm: line[arm]["best_steering_ms"] for arm in arms}
        print(f"batch {batch:>2}: {line['steps']} steps replayed; the step waits for the "
              f"steering, in the step {best['in_step_cold']:.2f} ms cold, "
              f"{best['in_step_warm']:.2f} warm; ahead {best['ahead_cold']:.2f} cold, "
              f"{best['ahead_warm']:.2f} warm; the recorded tokens chosen: {chose}", flush=True)
        return
    for arm in arms:
        best = line[arm]["best_steering_ms"]
        print(f"batch {batch:>2}, {arm}: steering ms/step at 16, 128, 512 tokens: "
              + ", ".join(f"{best[name]:.2f}" for name in WINDOWS)
              + f" (512 / 16: {best['512'] / best['16']:.2f}); the recorded tokens chosen: "
              f"{chose}", flush=True)


def replayed(
    engine: TransformersEngine,
    rows: list[Any],
    steps: list[tuple[torch.Tensor, torch.Tensor]],
    between: Any,
    *,
    ahead: bool,
) -> tuple[list[float], bool]:
    """The steering's seconds at each recorded step but the first, replayed on copies of its
    logits, and whether it chose the recorded tokens (greedy); ``between`` runs before each
    step. ``ahead``: only ``Steering.apply`` is timed, the advance and ``prepare`` made before
    ``between``, as the work ahead is; else the logits processor's own time."""
    steered = [engine.steering(row) for row in rows]
    vocab_size = engine.tokenizer_info.vocab_size
    processor = SteeringLogitsProcessor(
        steered, vocab_size=vocab_size, stop_token_ids=engine.stop_token_ids, work_ahead=False,
    )
    steering, stop = Steering(vocab_size), set(engine.stop_token_ids)
    live, seconds, same = list(range(len(rows))), [], True
    with torch.inference_mode():
        for k, (last, logits) in enumerate(steps):
            tokens = last[:, -1].tolist()
            if k:
                live = [i for i in live if tokens[i] not in stop]
            if k and ahead:
                advance_all([steered[i] for i in live], [tokens[i] for i in live])
            pairs = [(i, steered[i]) for i in live]
            masks = steering.prepare(pairs) if ahead else None
            between()
            scores = logits.clone()
            started = time.perf_counter()
            if ahead:
                steering.apply(scores, pairs, masks=masks)
            else:
                processor(last, scores)
            if k:
                seconds.append(time.perf_counter() - started)
            if k + 1 < len(steps):
                chosen = scores.argmax(-1).tolist()
                following = steps[k + 1][0][:, -1].tolist()
                same &= all(chosen[i] == following[i] for i in live)
    return seconds, same


def recorded_steps(
    engine: TransformersEngine, rows: list[Any]
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Each step's (last tokens, logits) as ``engine`` hands them to its steering, for ``rows``."""
    steps: list[tuple[torch.Tensor, torch.Tensor]] = []
    steer = SteeringLogitsProcessor.__call__

    def recording(processor: Any, input_ids: torch.Tensor, scores: torch.Tensor) -> Any:
        steps.append((input_ids[:, -1:].clone(), scores.clone()))
        return steer(processor, input_ids, scores)

    with mock.patch.object(SteeringLogitsProcessor, "__call__", recording):
        engine.run(rows)
    return steps


def lengths_section() -> dict[str, Any]:
    from citeformer.readability import Readability

    gen = CiteGenerator.default(progress=False, dtype="float32")
    engine = TransformersEngine(stand_in(gen.tokenizer, gen.model.config), gen.tokenizer)
    found: dict[str, Any] = {}
    for batch in (1, 8, 32, 64):
        rows = [
            engine.prepare(build_request(
                item.question, item.sources(), max_new_tokens=512,
                readability=Readability(end_bias=0.0),
            ))
            for item in held_out(batch)
        ]
        engine.run(rows[:1])  # warm the kernels
        decoded = engine.run(rows)
        seconds = decoded.step_seconds[1:]  # the prompt's call aside
        line = {name: _ms(seconds[a:b]) for name, (a, b) in WINDOWS.items()}
        line["answer_tokens"] = sorted(len(ids) for ids in decoded.ids)
        found[str(batch)] = line
        print(f"batch {batch:>2}: steering ms/step at 16, 128, 512 tokens: "
              + ", ".join(f"{line[name].get('median', float('nan')):.2f}" for name in WINDOWS)
              + f" (answers {line['answer_tokens'][0]}-{line['answer_tokens'][-1]} tokens)",
              flush=True)
    return found


def family_stand_in(family: str) -> tuple[Any, Any]:
    """A tokenizer of ``family`` and a stand-in on its vocabulary."""
    sys.path.insert(0, str(HERE.parent))
    from tests.vocab import family_tokenizer

    gen = CiteGenerator.default(progress=False, dtype="float32")
    tokenizer = family_tokenizer(family)
    config = gen.model.config.to_dict()
    config.update(vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id,
                  eos_token_id=tokenizer.eos_token_id, pad_token_id=None)
    from transformers import LlamaConfig

    return tokenizer, stand_in(tokenizer, LlamaConfig(**config))


def stand_in_of(family: str | None) -> tuple[Any, Any]:
    """A tokenizer and a stand-in on its vocabulary: ``family``'s, or the embedded model's."""
    if family is not None:
        return family_stand_in(family)
    gen = CiteGenerator.default(progress=False, dtype="float32")
    return gen.tokenizer, stand_in(gen.tokenizer, gen.model.config)


def family_section(family: str, tokens: int) -> dict[str, Any]:
    tokenizer, model = family_stand_in(family)
    engine = TransformersEngine(model, tokenizer)
    line = step_times(engine, held_out(32), tokens)
    print(f"{family} ({len(tokenizer)} tokens), batch 32: steering "
          f"{line['steered']['steering_ms']['median']:.2f} ms/step; step plain "
          f"{line['plain']['step_ms']['median']:.2f}, steered "
          f"{line['steered']['step_ms']['median']:.2f}, added {line['added_ms']:.2f} ms",
          flush=True)
    return {"family": family, "vocab": len(tokenizer), "32": line}


def grammar_section(family: str) -> dict[str, Any]:
    import xgrammar as xgr

    from citeformer.decoding.steering import local_grammar
    from citeformer.decoding.vocab import Vocabulary

    sys.path.insert(0, str(HERE.parent))
    from tests.vocab import family_tokenizer

    stored = json.loads(ANSWERS.read_text())["answers"]
    cases = []
    for dataset in ("encyclopedic", "technical", "api", "paraphrase"):
        for item in load_dataset(dataset):
            answer = stored.get(f"{dataset}/required/{item.id}")
            if item.split != "dev" and answer and answer["finish_reason"] == "stop":
                request = build_request(item.question, item.sources())
                if not request.abstains(answer["text"]):  # the refusal is a literal
                    cases.append((request, answer["text"]))
    tokenizers = {"smollm2": CiteGenerator.default(progress=False).tokenizer,
                  family: family_tokenizer(family)}
    found: dict[str, Any] = {}
    for name, tokenizer in tokenizers.items():
        info = xgr.TokenizerInfo.from_huggingface(tokenizer)
        vocab = Vocabulary.cached(info)
        compiler = xgr.GrammarCompiler(info, max_threads=1)
        bitmask = xgr.allocate_token_bitmask(1, info.vocab_size)
        row = bitmask.numpy()[0]
        line: dict[str, Any] = {}
        for arm in ("bounded", "local"):
            seconds: dict[str, list[float]] = {"terms": [], "no terms": []}
            for request, text in cases:
                grammar = (request.grammar_text(spell_quotes=False) if arm == "bounded"
                           else local_grammar(request))
                matcher = xgr.GrammarMatcher(compiler.compile_grammar(grammar))
                bound = _word_bound(request, vocab, info.stop_token_ids) if arm == "local" else None
                kind = seconds["terms" if request.terms else "no terms"]
                for token in tokenizer.encode(text, add_special_tokens=False):
                    started = time.perf_counter()
                    matcher.fill_next_token_bitmask(bitmask)
                    if bound is not None:
                        bound.restrict(row)
                    kind.append(time.perf_counter() - started)
                    if not matcher.accept_token(token):
                        raise AssertionError(f"{arm} refused {text!r} at token {token}")
                    if bound is not None:
                        bound.advance(token)
            both = seconds["terms"] + seconds["no terms"]
            line[arm] = {"all": _us(both), **{key: _us(values) for key, values in seconds.items()}}
            print(f"{name} ({info.vocab_size} tokens) {arm:>7}: mean {_mean_us(both):.0f} µs/row "
                  f"(median {line[arm]['all']['median']:.0f}); with terms "
                  f"{_mean_us(seconds['terms']):.0f}, without {_mean_us(seconds['no terms']):.0f}"
                  f" ({len(both)} steps)", flush=True)
            line[arm]["mean"] = _mean_us(both)
        found[name] = line
    return found


def _word_bound(request: Any, vocab: Any, stop_ids: Any) -> Any:
    """The request's ``WordBound`` as the steering makes it (in a tree before ``word_bound_for``
    too)."""
    from citeformer.decoding import word_bound

    if hasattr(word_bound, "word_bound_for"):
        return word_bound.word_bound_for(request, vocab, stop_ids)
    if not word_bound.bounds_words(request):
        return None
    return word_bound.WordBound(vocab, request.grammar.max_word_chars, stop_ids)


def _mean_us(seconds: list[float]) -> float:
    return sum(seconds) / max(1, len(seconds)) * 1e6


SHAPES = {
    "word (\" \" word)*": 'root ::= word (" " word)* "."\nword ::= {char}+',
    "word (\" \" word){0,23}": 'root ::= word (" " word){{0,23}} "."\nword ::= {char}+',
    "(char | \" \" char)+": 'root ::= ({char} | " " {char})+ "."',
}
"""The words rule's shapes ``shapes`` compares (``{char}``: the grammar's word character)."""
SENTENCE = ("The finally clause runs whether or not the try statement produced an exception, and "
            "it always runs last before leaving")


def shapes_section(family: str) -> dict[str, Any]:
    import xgrammar as xgr

    sys.path.insert(0, str(HERE.parent))
    from tests.vocab import family_tokenizer

    char = "[^ \\t\\n\\r\\[\\].!?]"
    tokenizers = {"smollm2": CiteGenerator.default(progress=False).tokenizer,
                  family: family_tokenizer(family)}
    found: dict[str, Any] = {}
    for name, tokenizer in tokenizers.items():
        info = xgr.TokenizerInfo.from_huggingface(tokenizer)
        compiler = xgr.GrammarCompiler(info, max_threads=1)
        bitmask = xgr.allocate_token_bitmask(1, info.vocab_size)
        ids = tokenizer.encode(SENTENCE, add_special_tokens=False)
        line: dict[str, Any] = {}
        for shape, grammar in SHAPES.items():
            matcher = xgr.GrammarMatcher(compiler.compile_grammar(grammar.format(char=char)))
            seconds = []
            for _ in range(5):
                matcher.reset()
                for token in ids:
                    started = time.perf_counter()
                    matcher.fill_next_token_bitmask(bitmask)
                    seconds.append(time.perf_counter() - started)
                    if not matcher.accept_token(token):
                        raise AssertionError(f"{shape} refused the sentence's token {token}")
            line[shape] = _us(seconds)
            print(f"{name} ({info.vocab_size} tokens), {shape}: "
                  f"{line[shape]['median']:.0f} µs/row (p99 {line[shape]['p99']:.0f})", flush=True)
        found[name] = line
    return found


def _us(seconds: list[float]) -> dict[str, Any]:
    found = quantiles([s * 1e6 for s in seconds])
    return {key: found[key] for key in ("n", "median", "p99") if key in found}


def end_to_end_section(tokens: int) -> dict[str, Any]:
    default = CiteGenerator.default(progress=False)
    tokenizer = default.tokenizer
    items = [i for i in load_dataset("technical") if i.split != "dev"]
    requests = [build_request(i.question, i.sources(), max_new_tokens=tokens) for i in items]
    sized = sorted(zip(requests, items, strict=True),
                   key=lambda pair: -len(prompt_token_ids(pair[0], tokenizer)))[:8]
    chosen = [item for _, item in sized]
    lengths = [len(prompt_token_ids(r, tokenizer)) for r, _ in sized]
    plain = CiteGenerator.default(progress=False, dtype="float32")
    plain_rows = [plain.engine.prepare(r.replace(constrained=False)) for r, _ in sized]

    def run_default() -> None:
        default.generate_batch([i.question for i in chosen], [i.sources() for i in chosen],
                               max_new_tokens=tokens, batch_size=8)

    def run_plain() -> None:
        plain.engine.run(plain_rows)

    seconds = {"default": _best(run_default), "plain_float32": _best(run_plain)}
    speedup = seconds["plain_float32"] / seconds["default"]
    print(f"end to end, 8 prompts of {min(lengths)}-{max(lengths)} tokens: default "
          f"{seconds['default']:.2f} s ({default.model.dtype}), plain float32 "
          f"{seconds['plain_float32']:.2f} s: {speedup:.2f}x", flush=True)
    return {"prompt_tokens": lengths, "seconds": seconds, "speedup": speedup,
            "default_dtype": str(default.model.dtype)}


def _best(run: Any, tries: int = 2) -> float:
    times = []
    for _ in range(tries):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return min(times)


def memory_section(tokens: int, threads: int) -> dict[str, Any]:
    output = subprocess.run(
        [sys.executable, __file__, "--memory-child", "--tokens", str(tokens),
         "--threads", str(threads)],
        check=True, capture_output=True, text=True,
    ).stdout
    found: dict[str, Any] = json.loads(output.splitlines()[-1])
    print(f"batch of 32: peak RSS {found['peak_mb']:.0f} MB, {found['added_mb']:.0f} MB over "
          "the loaded model", flush=True)
    return found


def memory_child(tokens: int) -> None:
    gen = CiteGenerator.default(progress=False)
    items = held_out(32)
    gen.generate(items[0].question, items[0].sources(), max_new_tokens=2)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    gen.generate_batch([i.question for i in items], [i.sources() for i in items],
                       max_new_tokens=tokens, batch_size=32)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"peak_mb": peak, "added_mb": peak - before, "dtype": str(gen.model.dtype)}))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--label", default="current")
    parser.add_argument("--sections", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    parser.add_argument("--tokens", type=int, default=100)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--family", default="llama-bpe",
                        help="the tokenizer family of the family section's stand-in")
    parser.add_argument("--device", default="cpu", help="where the ahead section's stand-in runs")
    parser.add_argument("--reps", type=int, default=5, help="runs per arm in the ahead section")
    parser.add_argument("--batches", type=int, nargs="+", default=None,
                        help="the ahead and replay sections' batch sizes (default 1 8 32 64, "
                             "32 for a family; replay 1 8 32)")
    parser.add_argument("--memory-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.memory_child:
        memory_child(args.tokens)
        return
    for section in args.sections:
        if section == "steps":
            found = steps_section(args.tokens)
        elif section == "end_to_end":
            found = end_to_end_section(args.tokens)
        elif section == "grammar":
            found = grammar_section(args.family)
        elif section == "lengths":
            found = lengths_section()
        elif section == "family":
            found = family_section(args.family, args.tokens)
        elif section == "shapes":
            found = shapes_section(args.family)
        elif section == "ahead":
            found = ahead_section(args.tokens, args.device, args.reps, batches=args.batches)
        elif section == "cold_ops":
            found = cold_ops_section()
        elif section == "replay_floor":
            found = replay_floor_section(args.reps, args.batches)
        elif section in ("replay", "replay_lengths", "replay_family"):
            found = replay_section(
                args.tokens, args.reps, args.batches, long=section == "replay_lengths",
                family=args.family if section == "replay_family" else None,
            )
        elif section == "ahead_family":
            found = ahead_section(
                args.tokens, args.device, args.reps, args.family, batches=args.batches
            )
        else:
            found = memory_section(args.tokens, args.threads)
        # Read again before each write: runs of two trees side by side merge, not overwrite.
        stored: dict[str, Any] = json.loads(OUT.read_text()) if OUT.exists() else {}
        stored.setdefault(args.label, {})[section] = {"threads": args.threads, **found}
        OUT.write_text(json.dumps(stored, indent=1) + "\n")
    print(f"wrote {OUT} [{args.label}]")


if __name__ == "__main__":
    main()
