"""The answers to a batch of inputs, decoded together by a model in this process."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

from langchain_core.documents import Document

from citeformer.errors import InvalidInputError
from citeformer.request import AnswerGenerator, GenerationRequest
from citeformer_langchain.answer import CitationAnswer

__all__ = ["answer_inputs"]


def answer_inputs(
    generator: AnswerGenerator,
    inputs: Sequence[Any],
    prepare: Callable[[Any], tuple[GenerationRequest, list[Document]]],
    *,
    batch_size: int,
) -> list[CitationAnswer | Exception]:
    """One answer, or the error it raised, per input, in order.

    ``prepare`` makes each input's request and documents; an input it refuses gets its error and
    never reaches the model. The others are decoded ``batch_size`` rows at once where the
    generator can (``answer_batch``), one after another otherwise, and also one by one when the
    batch refuses a row, so that each input gets its own error.
    """
    results: list[CitationAnswer | Exception | None] = [None] * len(inputs)
    prepared = []
    for index, input_ in enumerate(inputs):
        try:
            prepared.append((index, *prepare(input_)))
        except Exception as error:  # this input's own error, reported with its result
            results[index] = error
    answers: list[Any] | None = None
    answer_batch = getattr(generator, "answer_batch", None)
    if prepared and answer_batch is not None:
        try:
            answers = answer_batch([request for _, request, _ in prepared], batch_size=batch_size)
        except InvalidInputError:
            answers = None
    for position, (index, request, documents) in enumerate(prepared):
        try:
            answer = generator.answer(request) if answers is None else answers[position]
            results[index] = CitationAnswer.from_cited_answer(answer, documents)
        except Exception as error:
            results[index] = error
    return cast(list[CitationAnswer | Exception], results)
