"""SteeringProcessor under vLLM's two processor interfaces: tests/server/vllm_processor_check.py,
run in the vLLM venv, checked here."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from tests.server.vllm_server import (
    CHECKOUT,
    _python,
    ensure_vllm_venv,
    install_checkout,
    model_dir,
    server_environment,
)

pytestmark = [pytest.mark.integration, pytest.mark.vllm]


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    venv = install_checkout(ensure_vllm_venv())
    done = subprocess.run(
        [str(_python(venv)), str(CHECKOUT / "tests" / "server" / "vllm_processor_check.py"),
         str(model_dir())],
        capture_output=True, text=True, timeout=600, env=server_environment(), check=False,
        cwd=CHECKOUT,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_both_interfaces_steer_as_in_process(report: dict[str, Any]) -> None:
    # Every step: the steered row equals the in-process steering, the plain row is untouched.
    assert report["v2_added"] == [True, False]
    assert report["v2_equal"] and all(report["v2_equal"])
    assert report["v1_equal"] and all(report["v1_equal"])
    assert report["allowed_after_open"] == ["1", "2"]  # two sources: [1 or [2, nothing else


def test_the_batch_is_followed(report: dict[str, Any]) -> None:
    assert report["moved_follows"] and report["removed_untouched"]


def test_a_failing_request_is_ended_and_the_other_steered(report: dict[str, Any]) -> None:
    assert report["failed_row_kept"] == report["stop_ids"]
    assert report["other_row_steered"]


def test_params_are_checked_at_admission(report: dict[str, Any]) -> None:
    good, none, handshake, broken, heavy, huge = report["validate"]
    assert (good, none) == ("ok", "ok")
    assert handshake == report["handshake_reply"]
    assert broken.startswith("citeformer is not valid JSON")
    assert heavy.startswith("citeformer.evidence: evidence weight must be a finite number > 0")
    assert huge == (
        "citeformer.readability: end_bias must be a finite number >= 0 and <= 10000, got an int "
        "of about 401 digits"
    )
    assert "does not run with speculative decoding" in report["speculative"]


# A request whose grammar compiles for 2 s beside a running one: no step of the running one waits
# for it longer than this (the processor's WAIT_S, 20 ms, plus the check of the waiting row's
# candidates and a loaded machine's slack).
STEP_BOUND_S = 0.1


def test_a_slow_compile_delays_no_other_request(report: dict[str, Any]) -> None:
    assert report["slow_steps"] > 50  # it ran for most of the compile
    assert report["slow_max_apply_s"] < STEP_BOUND_S


def test_a_request_waiting_for_its_grammar_keeps_it(report: dict[str, Any]) -> None:
    # What it wrote while its grammar compiled is an answer its full grammar accepts...
    assert report["slow_written_accepted"]
    assert all(1 <= k <= report["n_sources"] for k in report["slow_markers"])
    # ...and once compiled, it is steered as in process.
    assert not report["slow_left"]
    assert report["slow_steered_equal"] and all(report["slow_steered_equal"])
