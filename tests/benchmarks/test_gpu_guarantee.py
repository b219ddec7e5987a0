"""benchmarks/gpu_guarantee.py: its CPU smoke run, on the embedded model's tokenizer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from citeformer import CiteGenerator, Policy

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_guarantee.py"


@pytest.mark.integration
def test_quick_cpu_run_finds_no_violation(default_generator: CiteGenerator, tmp_path: Path
                                          ) -> None:
    tokenizers = tmp_path / "tokenizers"
    default_generator.tokenizer.save_pretrained(tokenizers / "smollm2")
    out = tmp_path / "gpu_guarantee.json"
    missing = tmp_path / "no-such-model"
    completed = subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "cpu", "--tokens", "200", "--quick",
         "--tokenizers", str(tokenizers), "--model", str(missing), "--out", str(out)],
        capture_output=True, text=True, timeout=400,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["violations"] == 0
    assert report["violations_by_pass"] == {"sequential": 0, "batched": 0}
    family = report["families"]["smollm2"]
    for pass_name in ("sequential", "batched"):
        assert set(family[pass_name]) == {p.value for p in Policy}
        for totals in family[pass_name].values():
            assert totals["answers"] > 0 and totals["tokens"] > 0
            assert totals["markers"] > 0  # the adversary does cite: the checks saw markers
    assert family["batched"]["quotes_only"]["quotes"] > 0
    rows = {(row["batch"], row["arm"]): row for row in report["speed"]}
    assert set(rows) == {(b, arm) for b in (1, 32) for arm in ("constrained", "unconstrained")}
    for (batch, arm), row in rows.items():
        assert row["model"] == "adversary/smollm2"
        assert row["tokens"] == batch * report["speed_tokens"]
        assert row["tokens_per_s"] > 0 and row["step_ms"]["median"] > 0
        assert (row["steering_ms"] is None) == (arm == "unconstrained")
    (skipped,) = report["speed_skipped"]
    assert str(missing) in skipped
    assert "| model | batch | arm | tokens/s |" in completed.stdout
