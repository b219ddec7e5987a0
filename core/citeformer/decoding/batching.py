"""Planning batches: which requests decode together, and one error for every bad row.

A batch is one ``model.generate`` call on left-padded prompts (``DecodingEngine.run``); rows of one
batch share the decoding settings (``decoding_key``) and may differ in sources, policy and grammar
options, since each row has its own grammar matcher, quote guard and levers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from citeformer.errors import InputTypeError, InvalidInputError
from citeformer.request import GenerationRequest, SourceLike, build_request
from citeformer.types import Policy

__all__ = [
    "DecodingKey",
    "Prepared",
    "build_requests",
    "check_batch_size",
    "check_one_batch",
    "decoding_key",
    "plan_batches",
    "prepare_all",
]

DecodingKey = tuple[int, bool, float | None, int | None, bool]
"""(max_new_tokens, do_sample, temperature, seed, constrained): what one batch must share."""


@dataclass(frozen=True)
class Prepared:
    """One checked request, ready to decode: its prompt's token ids.

    Its grammar is compiled when its batch runs (``DecodingEngine.steering``) and dropped with
    the batch, so a call of many rows holds the grammars of one batch at a time, beside the
    engine's cache.
    """

    request: GenerationRequest
    """The request."""

    prompt_ids: list[int]
    """Token ids of the prompt the model is shown."""


def decoding_key(request: GenerationRequest) -> DecodingKey:
    """The decoding settings of ``request`` that every row of its batch must share.

    Temperature and seed matter only when sampling, so greedy rows share a batch whatever they
    hold.
    """
    if request.do_sample:
        return (
            request.max_new_tokens, True, request.temperature, request.seed, request.constrained
        )
    return (request.max_new_tokens, False, None, None, request.constrained)


def check_one_batch(rows: Sequence[Prepared]) -> None:
    """Raise unless every row shares one ``decoding_key``, as the rows of one batch must."""
    keys = {decoding_key(row.request) for row in rows}
    if len(keys) > 1:
        raise InvalidInputError(
            f"one batch needs one set of decoding settings, got {sorted(keys, key=str)}; "
            "group the rows with plan_batches"
        )


def plan_batches(rows: Sequence[Prepared], batch_size: int) -> list[list[int]]:
    """Indices of ``rows`` per forward batch.

    Rows are grouped by ``decoding_key`` (groups in order of first appearance) and, within a
    group, sorted by prompt length so that rows of similar length are padded together.
    """
    groups: dict[DecodingKey, list[int]] = {}
    for index, row in enumerate(rows):
        groups.setdefault(decoding_key(row.request), []).append(index)
    batches = []
    for indices in groups.values():
        ordered = sorted(indices, key=lambda i: len(rows[i].prompt_ids))
        batches += [ordered[i : i + batch_size] for i in range(0, len(ordered), batch_size)]
    return batches


def check_batch_size(value: object) -> int:
    """``value`` if it is an int of at least 1."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputTypeError(
            f"batch_size must be an int, got {type(value).__name__} {value!r}; pass e.g. 8"
        )
    if value < 1:
        raise InvalidInputError(
            f"batch_size must be at least 1, got {value}; 1 decodes one row at a time"
        )
    return value


def build_requests(
    questions: Sequence[str],
    sources: Sequence[Sequence[SourceLike]],
    policy: Policy | str,
    options: Mapping[str, Any],
) -> list[GenerationRequest]:
    """One request per question (with the sources at the same index), all rows checked.

    Raises one ``InvalidInputError`` naming every row that ``build_request`` refuses.
    """
    for name, value in (("questions", questions), ("sources", sources)):
        if isinstance(value, str) or not isinstance(value, Sequence):
            raise InputTypeError(
                f"{name} must be a list (one item per question), got {type(value).__name__}"
            )
    if len(questions) != len(sources):
        raise InvalidInputError(
            f"got {len(questions)} questions but {len(sources)} lists of sources; pass one list "
            "of sources per question, in the same order"
        )
    requests: list[GenerationRequest] = []
    problems: dict[int, str] = {}
    for index, (question, row_sources) in enumerate(zip(questions, sources, strict=True)):
        try:
            requests.append(build_request(question, row_sources, policy, **options))
        except InvalidInputError as error:
            problems[index] = str(error)
    _raise_for(problems, len(questions))
    return requests


def prepare_all(
    prepare: Callable[[GenerationRequest], Prepared], requests: Sequence[GenerationRequest]
) -> list[Prepared]:
    """``prepare`` every request, or raise one ``InvalidInputError`` naming every bad row."""
    if isinstance(requests, GenerationRequest) or not isinstance(requests, Sequence):
        raise InputTypeError(
            f"requests must be a list of GenerationRequest, got {type(requests).__name__}"
        )
    prepared: list[Prepared] = []
    problems: dict[int, str] = {}
    for index, request in enumerate(requests):
        if not isinstance(request, GenerationRequest):
            problems[index] = (
                f"a {type(request).__name__} is not a GenerationRequest; build each row with "
                "citeformer.build_request"
            )
            continue
        try:
            prepared.append(prepare(request))
        except InvalidInputError as error:
            problems[index] = str(error)
    _raise_for(problems, len(requests))
    return prepared


def _raise_for(problems: Mapping[int, str], rows: int) -> None:
    if not problems:
        return
    # Rows that fail for the same reason (an option shared by every row) are listed together.
    by_reason: dict[str, list[int]] = {}
    for index, reason in problems.items():
        by_reason.setdefault(reason, []).append(index)
    lines = [
        f"  {'row' if len(indices) == 1 else 'rows'} {', '.join(map(str, indices))}: {reason}"
        for reason, indices in by_reason.items()
    ]
    raise InvalidInputError(
        f"{len(problems)} of {rows} rows cannot be answered (rows counted from 0), so nothing "
        "was generated; fix or drop them:\n" + "\n".join(lines)
    )
