"""benchmarks/same_steering.py: recorded steps steered again, compared bit for bit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from same_steering import compare, steered_hashes
from steering_speed import recorded_steps

from citeformer import CiteGenerator, Source, build_request
from tests.adversary import bracket_hungry_llama
from tests.tiny import tiny_tokenizer


def test_a_replay_gives_the_same_hashes_and_a_changed_step_is_told(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tokenizer = tiny_tokenizer()
    engine = CiteGenerator(bracket_hungry_llama(tokenizer), tokenizer).engine
    sources = [Source("Paris is the capital of France."), Source("Lyon is in France.")]

    def rows() -> list[object]:
        return [engine.prepare(build_request(question, sources, max_new_tokens=12))
                for question in ("Where is Paris?", "What is Lyon?")]

    steps = recorded_steps(engine, rows())
    first, again = steered_hashes(engine, rows(), steps), steered_hashes(engine, rows(), steps)
    assert first == again and len(set(first)) == len(steps) > 2
    last, logits = steps[2]
    nudged = logits.clone()
    nudged[0] += 0.5  # the steering's own inputs changed at one step: its output differs there
    changed = steered_hashes(engine, rows(), [*steps[:2], (last, nudged), *steps[3:]])
    assert [k for k, (a, b) in enumerate(zip(first, changed, strict=True)) if a != b] == [2]
    case = {"set": "technical", "policy": "required", "rows": 2}
    before, after = tmp_path / "before.json", tmp_path / "after.json"
    before.write_text(json.dumps([case | {"steps": first}]))
    after.write_text(json.dumps([case | {"steps": again}]))
    assert compare(before, after) == 0
    after.write_text(json.dumps([case | {"steps": changed}]))
    assert compare(before, after) == 1
    assert "steps [2] differ" in capsys.readouterr().out
