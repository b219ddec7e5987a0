"""VLLMGenerator: vllm.LLM in its own venv's process, steered by citeformer's processor.

The cases run in ``tests/server/vllm_offline.py`` under the vLLM venv's interpreter (vLLM pins
its own torch and xgrammar); this checks what that run printed.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from citeformer import Policy, scan_markers
from citeformer.grammar.quotes import find_quotes
from tests.server.vllm_server import (
    CHECKOUT,
    _python,
    ensure_vllm_venv,
    install_checkout,
    server_environment,
)

pytestmark = [pytest.mark.integration, pytest.mark.vllm]

RUN_TIMEOUT_S = 600


@pytest.fixture(scope="module")
def cases() -> dict[str, dict[str, Any]]:
    venv = install_checkout(ensure_vllm_venv())
    done = subprocess.run(
        [str(_python(venv)), str(CHECKOUT / "tests" / "server" / "vllm_offline.py")],
        capture_output=True, text=True, timeout=RUN_TIMEOUT_S, env=server_environment(),
        check=False, cwd=CHECKOUT,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    found = {}
    for line in done.stdout.splitlines():
        if line.startswith("{"):
            row = json.loads(line)
            found[f"{row['case']}/{row.get('policy', '')}"] = row
    return found


def test_every_marker_is_in_range_under_attack(cases: dict[str, dict[str, Any]]) -> None:
    from tests.server.vllm_offline import SOURCES

    attacked = [row for key, row in cases.items() if key.startswith("attack-")]
    assert len(attacked) == 9  # three seeds under each policy, sampled at temperature 1
    markers = 0
    for row in attacked:
        scan = scan_markers(row["text"], row["n"])
        assert (scan.out_of_range, scan.malformed, scan.stray) == ((), (), ()), row["text"]
        if row["policy"] == Policy.QUOTES_ONLY.value:
            assert [q.text for q in find_quotes(row["text"], SOURCES)] == row["quotes"]
        markers += len(scan.citations)
    assert markers > 0


def test_greedy_answers_cite_and_end(cases: dict[str, dict[str, Any]]) -> None:
    for policy in Policy:
        row = cases[f"greedy/{policy.value}"]
        assert row["citations"] and set(row["citations"]) <= {1, 2, 3}, row["text"]
        assert row["finish"] == "stop", row["text"]
    # The REQUIRED answer is the grammar's: every sentence ends with its cite-group.
    text = cases[f"greedy/{Policy.REQUIRED.value}"]["text"]
    assert text.rstrip().endswith("].") and "1889" in text, text


def test_one_answer_and_its_stream_agree(cases: dict[str, dict[str, Any]]) -> None:
    row = cases["one/"]
    assert row["text"] == row["streamed"] == row["stream_answer"]
    assert row["text"] == cases[f"greedy/{Policy.REQUIRED.value}"]["text"]


def test_a_bad_row_is_named_before_anything_runs(cases: dict[str, dict[str, Any]]) -> None:
    assert "row 1: the question is empty" in cases["bad-row/"]["error"]

