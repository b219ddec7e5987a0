"""The answers to a batch of inputs, decoded together by a model in this process, each input's
model call reported as a run of its own (``citeformer_langchain.tracing``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any, Generic, TypeVar, cast

from langchain_core.callbacks import AsyncCallbackManagerForChainRun, CallbackManagerForChainRun
from langchain_core.documents import Document
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.runnables.config import get_config_list, run_in_executor
from typing_extensions import override

from citeformer.errors import InvalidInputError
from citeformer.generation.protocols import AnswerGenerator
from citeformer.request import GenerationRequest
from citeformer_langchain.answer import CitationAnswer
from citeformer_langchain.tracing import AsyncModelRun, ModelRun, TracedModel

__all__ = [
    "InOrderAsCompleted",
    "Prepared",
    "aanswer_traced",
    "answer_inputs",
    "answer_traced",
    "prepare_all",
]

Prepared = tuple[GenerationRequest, list[Document]] | Exception
"""An input's request and the documents its sources are, or the error that refused it."""

Result = CitationAnswer | Exception
Input = TypeVar("Input")
Output = TypeVar("Output")


def prepare_all(
    prepare: Callable[[Any, dict[str, Any]], tuple[GenerationRequest, list[Document]]],
    inputs: Sequence[Any],
    options: dict[str, Any],
) -> list[Prepared]:
    """Each input's request and documents, or the error that refused it."""
    prepared: list[Prepared] = []
    for input_ in inputs:
        try:
            prepared.append(prepare(input_, options))
        except Exception as error:  # this input's own error, reported with its result
            prepared.append(error)
    return prepared


def answer_inputs(
    generator: AnswerGenerator, prepared: Sequence[Prepared], *, batch_size: int
) -> list[Result]:
    """One answer, or the error it raised, per prepared input, in order.

    An input refused while being prepared keeps its error and never reaches the model. The
    others are decoded ``batch_size`` rows at once where the generator can (``answer_batch``),
    one after another otherwise, and also one by one when the batch refuses a row, so that each
    input gets its own error.
    """
    results: list[Result | None] = [
        item if isinstance(item, Exception) else None for item in prepared
    ]
    ready = [
        (index, item) for index, item in enumerate(prepared) if not isinstance(item, Exception)
    ]
    answers: list[Any] | None = None
    answer_batch = getattr(generator, "answer_batch", None)
    if ready and answer_batch is not None:
        try:
            answers = answer_batch([request for _, (request, _) in ready], batch_size=batch_size)
        except InvalidInputError:
            answers = None
    for position, (index, (request, documents)) in enumerate(ready):
        try:
            answer = generator.answer(request) if answers is None else answers[position]
            results[index] = CitationAnswer.from_cited_answer(answer, documents)
        except Exception as error:
            results[index] = error
    return cast(list[Result], results)


def answer_traced(
    generator: AnswerGenerator,
    model: TracedModel,
    prepared: Sequence[Prepared],
    run_managers: Sequence[CallbackManagerForChainRun],
    *,
    batch_size: int,
) -> list[Result]:
    """``answer_inputs``, every prepared input's model run started before the batch is decoded
    and ended with its answer or error after."""
    runs = [
        None if isinstance(item, Exception) else ModelRun.start(manager, model, item[0])
        for manager, item in zip(run_managers, prepared, strict=True)
    ]
    try:
        results = answer_inputs(generator, prepared, batch_size=batch_size)
    except BaseException as error:
        for run in runs:
            if run is not None:
                run.failed(error)
        raise
    for run, result in zip(runs, results, strict=True):
        if run is None:
            continue
        if isinstance(result, Exception):
            run.failed(result)
        else:
            run.ended(result)
    return results


async def aanswer_traced(
    generator: AnswerGenerator,
    model: TracedModel,
    prepared: Sequence[Prepared],
    run_managers: Sequence[AsyncCallbackManagerForChainRun],
    *,
    batch_size: int,
) -> list[Result]:
    """``answer_traced`` for an async step: the runs reported on the event loop, the batch
    decoded in a worker thread."""
    runs = [
        None if isinstance(item, Exception) else await AsyncModelRun.start(manager, model, item[0])
        for manager, item in zip(run_managers, prepared, strict=True)
    ]
    try:
        results = await run_in_executor(
            None, lambda: answer_inputs(generator, prepared, batch_size=batch_size)
        )
    except BaseException as error:
        for run in runs:
            if run is not None:
                await run.failed(error)
        raise
    for run, result in zip(runs, results, strict=True):
        if run is None:
            continue
        if isinstance(result, Exception):
            await run.failed(result)
        else:
            await run.ended(result)
    return results


class InOrderAsCompleted(Runnable[Input, Output], Generic[Input, Output]):
    """``batch_as_completed``/``abatch_as_completed`` as one ``invoke`` after another: results
    come in input order, each input its own run."""

    @override
    def batch_as_completed(  # type: ignore[override]
        self,
        inputs: Sequence[Input],
        config: RunnableConfig | Sequence[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> Iterator[tuple[int, Output | Exception]]:
        # One input after another (the model decodes one request at a time here, or batch()
        # would be used), so "as completed" is input order.
        configs = get_config_list(config, len(inputs))
        for index, (input_, config_) in enumerate(zip(inputs, configs, strict=True)):
            try:
                yield index, self.invoke(input_, config_, **kwargs)
            except Exception as error:
                yield index, _reported(error, return_exceptions)

    @override
    async def abatch_as_completed(  # type: ignore[override]
        self,
        inputs: Sequence[Input],
        config: RunnableConfig | Sequence[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> AsyncIterator[tuple[int, Output | Exception]]:
        configs = get_config_list(config, len(inputs))
        for index, (input_, config_) in enumerate(zip(inputs, configs, strict=True)):
            try:
                yield index, await self.ainvoke(input_, config_, **kwargs)
            except Exception as error:
                yield index, _reported(error, return_exceptions)


def _reported(error: Exception, return_exceptions: bool) -> Exception:
    # With return_exceptions=True an input's error is its result; otherwise it ends the batch.
    if not return_exceptions:
        raise error
    return error
