"""benchmarks/steering_speed.py: a recorded decode replayed through the steering."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from steering_speed import floor_runs, recorded_steps, replayed

from citeformer import CiteGenerator, Source, build_request
from tests.adversary import bracket_hungry_llama
from tests.tiny import tiny_tokenizer


@pytest.fixture(scope="module")
def decode() -> tuple[Any, list[Any], list[tuple[torch.Tensor, torch.Tensor]]]:
    """A two-row greedy decode of a tiny random model, each step's tokens and logits recorded."""
    tokenizer = tiny_tokenizer()
    engine = CiteGenerator(bracket_hungry_llama(tokenizer), tokenizer).engine
    sources = [Source("Paris is the capital of France."), Source("Lyon is in France.")]
    rows = [engine.prepare(build_request(question, sources, max_new_tokens=12))
            for question in ("Where is Paris?", "What is Lyon?")]
    return engine, rows, recorded_steps(engine, rows)


@pytest.mark.parametrize("ahead", [False, True])
def test_the_replayed_steering_chooses_the_recorded_tokens(decode: Any, ahead: bool) -> None:
    engine, rows, steps = decode
    assert len(steps) > 2 and all(logits.shape[0] == 2 for _, logits in steps)
    calls: list[int] = []
    seconds, same = replayed(engine, rows, steps, lambda: calls.append(1), ahead=ahead)
    assert same
    assert len(seconds) == len(steps) - 1 and all(s > 0 for s in seconds)
    assert len(calls) == len(steps)  # ``between`` ran before every step


def test_a_replay_that_strays_from_the_recording_is_told(decode: Any) -> None:
    engine, rows, steps = decode
    # The second step's logits pushed toward another token than the one the recording took.
    last, logits = steps[1]
    chosen = steps[2][0][:, -1]
    bent = logits.clone()
    bent[torch.arange(2), chosen] = float("-inf")
    strayed = [*steps[:1], (last, bent), *steps[2:]]
    assert not replayed(engine, rows, strayed, lambda: None, ahead=True)[1]


def test_the_floor_arms_leave_out_the_writes_and_put_them_back(decode: Any) -> None:
    from citeformer.decoding.edits import StepEdits
    from citeformer.decoding.masks import MaskPlan

    engine, rows, steps = decode
    writes = (StepEdits.apply, MaskPlan.apply)
    seconds, chose = floor_runs(engine, rows, steps, {"warm": lambda: None}, reps=2)
    assert set(seconds) == set(chose) == {
        "full, warm", "without the edits' write, warm",
        "without the edits' and the mask's writes, warm",
    }
    assert all(len(runs) == 2 and len(runs[0]) == len(steps) - 1 for runs in seconds.values())
    # The bracket-hungry model, unmasked, writes what the grammar forbids: that arm strays.
    assert chose["full, warm"] and not chose["without the edits' and the mask's writes, warm"]
    assert (StepEdits.apply, MaskPlan.apply) == writes
