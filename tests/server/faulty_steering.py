"""A steering processor that fails on purpose, loaded beside citeformer's in the tests' vLLM.

It steers the requests whose payload travels under ``"citeformer_faulty"`` exactly as
``citeformer.vllm.SteeringProcessor`` does, with one more lever that raises once the answer has
a few tokens: what the processor does with a request whose steering fails (it ends that request
and goes on with the others) is then seen on a real server.
"""

from __future__ import annotations

from typing import Any

from citeformer.decoding.edits import StepEdits
from citeformer.decoding.levers import AnswerState, Lever
from citeformer.decoding.steering import RowSteering
from citeformer.vllm import SteeringProcessor

FAULTY_KEY = "citeformer_faulty"
FAIL_AFTER_TOKENS = 3


class _Raises(Lever):
    def edit(self, state: AnswerState, edits: StepEdits) -> None:
        if len(state.tokens) >= FAIL_AFTER_TOKENS:
            raise RuntimeError("a lever failed on purpose")


class FaultySteeringProcessor(SteeringProcessor):
    """citeformer's processor for ``"citeformer_faulty"`` payloads, plus a lever that raises."""

    payload_key = FAULTY_KEY

    def _prepare(self, payload: str, check: Any) -> RowSteering:
        steering = super()._prepare(payload, check)
        steering.levers = (*steering.levers, _Raises())
        return steering
