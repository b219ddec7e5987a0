"""Decoding requests in left-padded batches, each row under its own grammar, quotes and evidence.

Every answer of a ``CiteGenerator`` is decoded here: one request alone is a batch of one
(``answer``, ``answer_stream``), many are planned into batches (``answer_batch``). A batch is one
``model.generate`` call on left-padded prompts; rows of one batch share the decoding settings
(``decoding_key``) and may differ in sources, policy and grammar options, since each row has its
own grammar matcher, quote guard and evidence processor (``BatchLogitsProcessor``).

Greedy rows decode to the same tokens alone as in a batch up to floating point: a padded batch
runs the same arithmetic in other shapes, which can move a logit in its last bits and, where two
tokens are almost tied, flip the argmax. Sampled rows draw from one random stream per batch, so a
seeded row's sample depends on the batch it was drawn in.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import xgrammar as xgr
from transformers import (
    LogitsProcessor,
    LogitsProcessorList,
    StoppingCriteria,
    StoppingCriteriaList,
)
from transformers.generation.streamers import BaseStreamer

from citeformer.answers import cited_answer
from citeformer.errors import InputTypeError, InvalidInputError, PromptTooLongError
from citeformer.processor import (
    BatchLogitsProcessor,
    EvidenceLogitsProcessor,
    IdTokens,
    QuoteLogitsProcessor,
    RowConstraints,
)
from citeformer.prompt import render_prompt
from citeformer.quotes import QuoteGuard
from citeformer.request import GenerationRequest, SourceLike, build_request
from citeformer.steer import readability_processors
from citeformer.types import CitedAnswer, FinishReason, Policy

if TYPE_CHECKING:
    from citeformer.generator import CiteGenerator

DEFAULT_BATCH_SIZE = 8
"""Rows per forward batch: on 2 CPU cores the embedded model decodes 8 rows at several times the
rate of one; larger batches gain less and pad more."""

DecodingKey = tuple[int, bool, float | None, int | None, bool]
"""(max_new_tokens, do_sample, temperature, seed, constrained): what one batch must share."""


@dataclass(frozen=True)
class Prepared:
    """One checked request, ready to decode: its prompt's token ids and compiled grammar."""

    request: GenerationRequest
    """The request."""

    prompt_ids: list[int]
    """Token ids of the prompt the model is shown."""

    compiled: xgr.CompiledGrammar | None
    """The citation grammar, or ``None`` when the request is unconstrained."""


@dataclass(frozen=True)
class Decoded:
    """What one batch produced."""

    ids: list[list[int]]
    """Generated token ids per row, in the rows' order, up to and including a stop token."""

    step_seconds: list[float]
    """Wall time of the masks and biases at each step, all rows together (empty unconstrained)."""


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


def prepare(gen: CiteGenerator, request: GenerationRequest) -> Prepared:
    """Render and tokenize the prompt, check that it fits, and compile the grammar."""
    prompt = request.prompt
    if prompt is None:
        prompt = render_prompt(request.messages(), gen.tokenizer)
    prompt_ids = list(gen.tokenizer(prompt, add_special_tokens=False).input_ids)
    check_fits(gen, request, len(prompt_ids))
    compiled = (
        gen.compiled_grammar(
            request.n_sources, request.policy, terms=request.terms, **request.grammar.as_dict()
        )
        if request.constrained else None
    )
    return Prepared(request, prompt_ids, compiled)


def prepare_all(gen: CiteGenerator, requests: Sequence[GenerationRequest]) -> list[Prepared]:
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
            prepared.append(prepare(gen, request))
        except InvalidInputError as error:
            problems[index] = str(error)
    _raise_for(problems, len(requests))
    return prepared


def check_fits(gen: CiteGenerator, request: GenerationRequest, prompt_tokens: int) -> None:
    """Raise ``PromptTooLongError`` if the prompt and the token budget exceed the context."""
    limit = gen.context_length
    if limit is None or prompt_tokens + request.max_new_tokens <= limit:
        return
    question_tokens = len(gen.tokenizer(request.question, add_special_tokens=False).input_ids)
    if question_tokens + request.max_new_tokens > limit // 2:
        advice = "shorten the question, or lower max_new_tokens"
    else:
        advice = "pass fewer or shorter sources, or a smaller max_new_tokens"
    raise PromptTooLongError(
        f"the prompt is {prompt_tokens} tokens (the question {question_tokens}) and "
        f"max_new_tokens is {request.max_new_tokens}, but the model's context holds "
        f"{limit}; {advice}"
    )


def decode(
    gen: CiteGenerator,
    rows: Sequence[Prepared],
    *,
    streamer: BaseStreamer | None = None,
    cancel: threading.Event | None = None,
) -> Decoded:
    """Generate every row of one batch in a single left-padded ``model.generate`` call.

    The rows must share their ``decoding_key``. ``streamer`` receives each step's tokens (one
    per row); ``cancel``, once set, ends the generation at the next step.
    """
    keys = {decoding_key(row.request) for row in rows}
    if len(keys) != 1:
        raise InvalidInputError(
            f"one batch needs one set of decoding settings, got {sorted(keys, key=str)}; "
            "group the rows with plan_batches"
        )
    request = rows[0].request
    stop = gen.stop_token_ids
    width = max(len(row.prompt_ids) for row in rows)
    input_ids = torch.full((len(rows), width), gen.pad_token_id, dtype=torch.long)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        input_ids[i, width - len(row.prompt_ids):] = torch.tensor(row.prompt_ids)
        attention[i, width - len(row.prompt_ids):] = 1
    processor = None
    if request.constrained:
        processor = BatchLogitsProcessor(
            [_constraints(gen, row, stop) for row in rows],
            vocab_size=gen.tokenizer_info.vocab_size, stop_token_ids=stop,
        )
    sampling: dict[str, Any] = (
        {"do_sample": True, "temperature": request.temperature, "top_k": 0, "top_p": 1.0}
        if request.do_sample
        else {"do_sample": False, "temperature": None, "top_k": None, "top_p": None}
    )
    seeded = request.seed is not None
    rng = torch.random.fork_rng(devices=[]) if seeded else contextlib.nullcontext()
    device = gen.model.device
    stopping = StoppingCriteriaList([_Cancelled(cancel)] if cancel is not None else [])
    with rng, torch.inference_mode():
        if request.seed is not None:
            torch.manual_seed(request.seed)
        output = gen.model.generate(
            input_ids=input_ids.to(device),
            attention_mask=attention.to(device),
            max_new_tokens=request.max_new_tokens,
            logits_processor=LogitsProcessorList([processor] if processor is not None else []),
            stopping_criteria=stopping,
            eos_token_id=stop,
            pad_token_id=gen.pad_token_id,
            streamer=streamer,
            **sampling,
        )
    generated = output[:, width:].tolist()
    return Decoded(
        [_until_stop(ids, stop) for ids in generated],
        processor.seconds if processor is not None else [],
    )


def answer_of(gen: CiteGenerator, row: Prepared, ids: Sequence[int]) -> CitedAnswer:
    """The re-checked ``CitedAnswer`` of one row's generated ids."""
    stopped = bool(ids) and ids[-1] in gen.stop_token_ids
    finish: FinishReason = "stop" if stopped else "length"
    return cited_answer(
        row.request, gen.decode(ids), finish,
        prompt_tokens=len(row.prompt_ids), generated_tokens=len(ids),
    )


def _constraints(gen: CiteGenerator, row: Prepared, stop: Sequence[int]) -> RowConstraints:
    request = row.request
    if row.compiled is None:
        return RowConstraints()
    before, steer = readability_processors(
        request.readability, request.policy, request.question, request.sources,
        gen.tokenizer_info, request.evidence, stop, request.grammar.max_sentence_words,
    )
    after: list[LogitsProcessor] = []
    if request.quotable_chars is not None:
        guard = QuoteGuard(
            request.sources, gen.vocab_index,
            min_quote_chars=request.grammar.min_quote_chars,
            quotable_chars=request.quotable_chars,
        )
        after.append(QuoteLogitsProcessor(guard, stop))
    after += steer  # only moves probability among what the masks left, or removes some of it
    # Last: it only adds finite values, so whatever the masks removed stays removed.
    if request.evidence is not None:
        after.append(EvidenceLogitsProcessor(
            request.evidence.bind(request.question, request.sources),
            request.evidence.weight, request.n_sources, IdTokens.of(gen.tokenizer_info),
        ))
    return RowConstraints(xgr.GrammarMatcher(row.compiled), before=before, after=after)


def _until_stop(ids: list[int], stop: Sequence[int]) -> list[int]:
    # After its stop token a finished row holds only padding.
    for position, token in enumerate(ids):
        if token in stop:
            return ids[: position + 1]
    return ids


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


class _Cancelled(StoppingCriteria):
    def __init__(self, event: threading.Event) -> None:
        self._event = event

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **_: Any) -> Any:
        stop = self._event.is_set()
        return torch.full((input_ids.shape[0],), stop, dtype=torch.bool, device=input_ids.device)
