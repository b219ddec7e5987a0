"""Ray Data over vLLM with citeformer's steering, in Ray's local mode: benchmarks/ray_data.py."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.server.vllm_server import CHECKOUT, _python, ensure_ray_venv, server_environment

pytestmark = [pytest.mark.integration, pytest.mark.vllm]


def test_many_questions_through_ray_data(tmp_path: Path) -> None:
    venv = ensure_ray_venv()
    done = subprocess.run(
        [str(_python(venv)), str(CHECKOUT / "benchmarks" / "ray_data.py"), "--questions", "4",
         "--max-new-tokens", "32", "--out", str(tmp_path / "ray.json")],
        capture_output=True, text=True, timeout=900, check=False, cwd=CHECKOUT,
        env={**server_environment(), "RAY_USAGE_STATS_ENABLED": "0"},
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    result = json.loads((tmp_path / "ray.json").read_text())
    assert result["questions"] == 4 and result["answers_with_fabricated_markers"] == 0
    assert all("[" in text for text in result["answers"].values()), result["answers"]
