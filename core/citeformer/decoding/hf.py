"""The steering core plugged into transformers' ``generate``: one logits processor per call.

``generate`` calls a logits processor once on the prompt, then once per step with every row's
ids so far; the adapter turns that convention into the core's: each row's last token goes to its
``RowSteering`` (``advance``), and the batch of logits to ``Steering.apply``.

Where the model runs on an accelerator, what needs no logits is done ahead: ``generate`` asks its
stopping criteria about each step's tokens before the model's next forward pass, and the
processor's ``ahead`` criterion hands the rows' ``advance`` and the rest of the next step's
``Steering.prepare`` (the grammar's fill, the word bounds, the quote masks, the levers that read no
scores) to a worker thread there, so the host makes them while the device computes the logits.
Where the model runs on the host it needs the cores itself: beside a CPU model the work ahead made
steps slower, not faster (benchmarks/README.md, "Steering ahead"), so there the processor does the
same work itself, in the same order, as it does without the criterion in ``generate``'s list.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch
from transformers import LogitsProcessor, StoppingCriteria

from citeformer.decoding.steering import RowSteering, Steering, StepMasks, advance_all
from citeformer.errors import InvalidInputError

__all__ = ["CancelCriteria", "SteeringLogitsProcessor"]


class SteeringLogitsProcessor(LogitsProcessor):
    """The masks and levers of a left-padded batch, each row under its own ``RowSteering``.

    A row that produced a stop token is finished: ``generate`` pads it from then on, and it is
    never advanced or steered again. One instance serves one ``generate()`` call; put ``ahead``
    in that call's stopping criteria, and ``close`` it once the call returns. ``work_ahead``:
    whether the ``ahead`` criterion starts the next step's work in a worker thread; ``None``,
    where the logits are not on the host (a model on an accelerator).
    """

    def __init__(
        self,
        rows: Sequence[RowSteering],
        *,
        vocab_size: int,
        stop_token_ids: Sequence[int],
        work_ahead: bool | None = None,
    ) -> None:
        self._rows = list(rows)
        self._stop = frozenset(stop_token_ids)
        self._steering = Steering(vocab_size)
        self._live = list(range(len(self._rows)))
        self._started = False
        self._work_ahead = work_ahead
        self._next: Future[StepMasks] | None = None
        self._worker: ThreadPoolExecutor | None = None
        self.ahead = _Ahead(self)
        """The stopping criterion (it never stops a row) that starts each step's work ahead."""
        self.seconds: list[float] = []
        """Wall time each step's steering (grammar, quotes, levers) held up the step: the logits
        processor's own, and the wait for what was started ahead, in seconds."""
        self.ahead_seconds: list[float] = []
        """Wall time of the work done ahead (advance and masks) at each step, in seconds."""

    def __call__(  # noqa: D102
        self, input_ids: torch.LongTensor, scores: torch.FloatTensor
    ) -> torch.FloatTensor:
        if input_ids.shape[0] != len(self._rows):
            raise InvalidInputError(
                f"SteeringLogitsProcessor was built for {len(self._rows)} rows but generate() "
                f"passed {input_ids.shape[0]}; build one processor per batch"
            )
        started = time.perf_counter()
        if self._next is not None:
            pending, self._next = self._next, None
            masks = pending.result()  # raises what the rows' advance raised
        else:
            if self._started:
                # Reading the last tokens waits for the forward pass on a GPU: the clock starts
                # after.
                last: list[int] = input_ids[:, -1].tolist()
                started = time.perf_counter()
                self._advance(last)
            masks = self._steering.prepare(self._steered())
        if not self._started and self._work_ahead is None:
            self._work_ahead = scores.device.type != "cpu"
        self._started = True
        self._steering.apply(scores, self._steered(), masks=masks)
        self.seconds.append(time.perf_counter() - started)
        return scores

    def start_ahead(self, input_ids: torch.Tensor) -> None:
        """Start advancing the rows past the tokens just chosen, and their next masks."""
        if not (self._started and self._work_ahead) or self._next is not None:
            return
        last: list[int] = input_ids[:, -1].tolist()
        if self._worker is None:
            self._worker = ThreadPoolExecutor(1, thread_name_prefix="citeformer-steering")
        self._next = self._worker.submit(self._advance_and_prepare, last)

    def _advance_and_prepare(self, last: list[int]) -> StepMasks:
        started = time.perf_counter()
        self._advance(last)
        masks = self._steering.prepare(self._steered())
        self.ahead_seconds.append(time.perf_counter() - started)
        return masks

    def _advance(self, last: list[int]) -> None:
        self._live = [i for i in self._live if last[i] not in self._stop]
        advance_all([self._rows[i] for i in self._live], [last[i] for i in self._live])

    def _steered(self) -> list[tuple[int, RowSteering]]:
        return [(i, self._rows[i]) for i in self._live]

    def close(self) -> None:
        """Wait for the work started ahead, if any, and end the worker thread."""
        if self._worker is not None:
            self._worker.shutdown(wait=True)
            self._worker = None
        self._next = None


class _Ahead(StoppingCriteria):
    """Tells a ``SteeringLogitsProcessor`` each step's tokens once chosen; stops no row."""

    def __init__(self, processor: SteeringLogitsProcessor) -> None:
        self._processor = processor

    def __call__(  # noqa: D102
        self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **_: Any
    ) -> Any:
        self._processor.start_ahead(input_ids)
        return torch.zeros((input_ids.shape[0],), dtype=torch.bool, device=input_ids.device)


class CancelCriteria(StoppingCriteria):
    """Ends every row of a ``generate`` call at the next step once ``event`` is set."""

    def __init__(self, event: threading.Event) -> None:
        self._event = event

    def __call__(  # noqa: D102
        self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **_: Any
    ) -> Any:
        stop = self._event.is_set()
        return torch.full((input_ids.shape[0],), stop, dtype=torch.bool, device=input_ids.device)
