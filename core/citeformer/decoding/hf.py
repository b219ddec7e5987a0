"""The steering core plugged into transformers' ``generate``: one logits processor per call.

``generate`` calls a logits processor once on the prompt, then once per step with every row's
ids so far; the adapter turns that convention into the core's: each row's last token goes to its
``RowSteering`` (``advance``), and the batch of logits to ``Steering.apply``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import torch
from transformers import LogitsProcessor, StoppingCriteria

from citeformer.decoding.steering import RowSteering, Steering, advance_all
from citeformer.errors import InvalidInputError

__all__ = ["CancelCriteria", "SteeringLogitsProcessor"]


class SteeringLogitsProcessor(LogitsProcessor):
    """The masks and levers of a left-padded batch, each row under its own ``RowSteering``.

    A row that produced a stop token is finished: ``generate`` pads it from then on, and it is
    never advanced or steered again. One instance serves one ``generate()`` call.
    """

    def __init__(
        self, rows: Sequence[RowSteering], *, vocab_size: int, stop_token_ids: Sequence[int]
    ) -> None:
        self._rows = list(rows)
        self._stop = frozenset(stop_token_ids)
        self._steering = Steering(vocab_size)
        self._live = list(range(len(self._rows)))
        self._started = False
        self.seconds: list[float] = []
        """Wall time of each step's steering (grammar, quotes, levers), in seconds."""

    def __call__(  # noqa: D102
        self, input_ids: torch.LongTensor, scores: torch.FloatTensor
    ) -> torch.FloatTensor:
        if input_ids.shape[0] != len(self._rows):
            raise InvalidInputError(
                f"SteeringLogitsProcessor was built for {len(self._rows)} rows but generate() "
                f"passed {input_ids.shape[0]}; build one processor per batch"
            )
        # Reading the last tokens waits for the forward pass on a GPU: the clock starts after.
        last: list[int] = input_ids[:, -1].tolist() if self._started else []
        started = time.perf_counter()
        if self._started:
            self._live = [i for i in self._live if last[i] not in self._stop]
            advance_all([self._rows[i] for i in self._live], [last[i] for i in self._live])
        self._started = True
        self._steering.apply(scores, [(i, self._rows[i]) for i in self._live])
        self.seconds.append(time.perf_counter() - started)
        return scores


class CancelCriteria(StoppingCriteria):
    """Ends every row of a ``generate`` call at the next step once ``event`` is set."""

    def __init__(self, event: threading.Event) -> None:
        self._event = event

    def __call__(  # noqa: D102
        self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **_: Any
    ) -> Any:
        stop = self._event.is_set()
        return torch.full((input_ids.shape[0],), stop, dtype=torch.bool, device=input_ids.device)
