"""The steering core plugged into transformers' ``generate``: one logits processor per call.

``generate`` calls a logits processor once on the prompt, then once per step with every row's
ids so far; the adapter turns that convention into the core's: each row's last token goes to its
``RowSteering`` (``advance``), and the batch of logits to ``Steering.apply``.

What needs no logits can be done ahead, while the model computes the next step's logits:
``generate`` asks its stopping criteria about each step's tokens before the model's next forward
pass, and the processor's ``ahead`` criterion notes them. When the model begins its output layer
(a forward pre-hook on ``get_output_embeddings()``: its matrix product runs without Python's
global lock, and on an accelerator the layers before it are still computing), a worker thread
starts the rows' ``advance`` and the rest of the next step's ``Steering.prepare`` (the grammar's
fill, the word bounds, the quote masks, the levers that read no scores), and the logits processor
waits only for what is left. Started any earlier, the worker takes turns with the forward pass's
own Python between the layers and gains nothing on a CPU (benchmarks/README.md, "Steering ahead of
the step"). A model without an output layer to watch has the work started at the criterion. The
work goes ahead where the logits are not on the host, or where torch leaves a core free for the
worker; otherwise the processor does the same work itself, in the same order, in the step.
"""

from __future__ import annotations

import os
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
    in that call's stopping criteria, ``watch`` the model, and ``close`` it once the call returns.
    ``work_ahead``: whether the next step's work is made in a worker thread while the model
    computes; ``None``, where the logits are not on the host (a model on an accelerator) or torch
    uses fewer threads than the process has cores.
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
        self._chosen: list[int] | None = None  # the tokens noted, their work not yet started
        self._owner: int | None = None  # the thread that runs the generate call
        self._hook: Any = None
        self.ahead = _Ahead(self)
        """The stopping criterion (it never stops a row) that notes each step's tokens for the work
        ahead (``note_chosen``)."""
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
            masks = self._steering.prepare(self._steered(), ahead=False)
            self._chosen = None  # made here: the output layer did not run since they were noted
        if not self._started and self._work_ahead is None:
            self._work_ahead = scores.device.type != "cpu" or torch.get_num_threads() < _cores()
        self._started = True
        self._steering.apply(scores, self._steered(), masks=masks)
        self.seconds.append(time.perf_counter() - started)
        return scores

    def watch(self, model: torch.nn.Module) -> None:
        """Start each step's work ahead when ``model`` begins its output layer (see the module)."""
        output_layer = getattr(model, "get_output_embeddings", None)
        layer = output_layer() if callable(output_layer) else None
        if isinstance(layer, torch.nn.Module):
            self._hook = layer.register_forward_pre_hook(self._head_begins)

    def note_chosen(self, input_ids: torch.Tensor) -> None:
        """Note the tokens just chosen: the rows' advance past them and their next masks."""
        if not (self._started and self._work_ahead) or self._next is not None:
            return
        # Read here, where generate has waited for the tokens: a read at the output layer would
        # wait for the device to finish the layers before it.
        self._chosen = input_ids[:, -1].tolist()
        self._owner = threading.get_ident()
        if self._hook is None:
            self.start_ahead()

    def start_ahead(self) -> None:
        """Start the work on the tokens noted, in the worker thread."""
        if self._chosen is None or threading.get_ident() != self._owner:
            return  # nothing noted, or the model runs for another caller's thread
        last, self._chosen = self._chosen, None
        if self._worker is None:
            self._worker = ThreadPoolExecutor(1, thread_name_prefix="citeformer-steering")
        self._next = self._worker.submit(self._advance_and_prepare, last)

    def _head_begins(self, module: torch.nn.Module, args: Any) -> None:
        self.start_ahead()

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
        """Stop watching the model, wait for the work started ahead, end the worker thread."""
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        if self._worker is not None:
            self._worker.shutdown(wait=True)
            self._worker = None
        self._next = None
        self._chosen = None


def _cores() -> int:
    """The cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


class _Ahead(StoppingCriteria):
    """Tells a ``SteeringLogitsProcessor`` each step's tokens once chosen; stops no row."""

    def __init__(self, processor: SteeringLogitsProcessor) -> None:
        self._processor = processor

    def __call__(  # noqa: D102
        self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **_: Any
    ) -> Any:
        self._processor.note_chosen(input_ids)
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
