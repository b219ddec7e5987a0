"""The decoding engine: a request's lifecycle on a model, over its tokenizer's kit.

``DecodingEngine`` holds a ``TokenizerKit`` (``citeformer.decoding.tokenizer_kit``: the
tokenizer, xgrammar's ``TokenizerInfo`` and compiler with its cache of compiled grammars, the
vocabulary's token table and the stop and pad ids) and takes a request through it;
``TransformersEngine`` adds a HuggingFace causal LM. A request goes through an engine in three
calls, each handing the next what it needs and none calling back up:

- ``prepare(request)``: the prompt rendered and tokenized and checked against the context
  (``Prepared``);
- ``run(rows)``: one left-padded ``model.generate`` call, every row steered by its own grammar
  (compiled by the kit, or taken from its cache), quote guard and levers (``Decoded``);
- ``finish(row, ids)``: the generated ids as a re-checked ``CitedAnswer``.

Greedy rows decode to the same tokens alone as in a batch up to floating point: a padded batch
runs the same arithmetic in other shapes, which can move a logit in its last bits and, where two
tokens are almost tied, flip the argmax (in bfloat16, whose last bits are coarser, more often:
1 of the 6 answers of ``test_batched_greedy_answers_equal_sequential_ones``, none in float32).
Sampled rows draw from one random stream per batch, so a seeded row's sample depends on the batch
it was drawn in.
"""

from __future__ import annotations

import abc
import contextlib
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import xgrammar as xgr
from transformers import LogitsProcessorList, StoppingCriteriaList
from transformers.generation.streamers import BaseStreamer

from citeformer.answers import cited_answer
from citeformer.decoding.batching import Prepared, check_one_batch
from citeformer.decoding.hf import CancelCriteria, SteeringLogitsProcessor
from citeformer.decoding.steering import RowSteering
from citeformer.decoding.tokenizer_kit import (
    GRAMMAR_CACHE_SIZE,
    TokenizerKit,
    answer_text,
    end_of_sequence_ids,
    kit_of,
    stop_token_ids,
)
from citeformer.decoding.vocab import Vocabulary
from citeformer.errors import PromptTooLongError, TokenizerMismatchError
from citeformer.prompt import render_prompt
from citeformer.request import GenerationRequest
from citeformer.types import CitedAnswer, FinishReason

__all__ = [
    "GRAMMAR_CACHE_SIZE",
    "Decoded",
    "DecodingEngine",
    "TransformersEngine",
    "answer_text",
    "end_of_sequence_ids",
    "prompt_token_ids",
    "stop_token_ids",
]


@dataclass(frozen=True)
class Decoded:
    """What one batch produced."""

    ids: list[list[int]]
    """Generated token ids per row, in the rows' order, up to and including a stop token."""

    step_seconds: list[float]
    """Wall time of the steering at each step, all rows together (empty unconstrained)."""


class DecodingEngine(abc.ABC):
    """A request's lifecycle on one runtime, over a tokenizer's ``TokenizerKit``.

    ``prepare`` and ``finish`` a request's row, and ``steering`` for it, are the same on every
    runtime; each runtime's engine adds ``run``: ``TransformersEngine`` (``generate``),
    ``citeformer.llama_cpp.LlamaCppEngine`` (llama-cpp-python in process). What belongs to the
    tokenizer (``TokenizerInfo``, compiled grammars, the vocabulary, the stop and pad ids) is
    the ``kit``'s, which engines over one vocabulary may share; the engine's names for it
    (``tokenizer``, ``tokenizer_info``, ``compile``, ``vocab``, ``stop_token_ids``,
    ``pad_token_id``) read the kit's.
    """

    def __init__(self, kit: TokenizerKit, *, context_length: int | None) -> None:
        self.kit = kit
        """The tokenizer's resources: ``TokenizerInfo``, compiled grammars, vocabulary, stop ids."""
        self.context_length = context_length
        """Most tokens (prompt plus answer) the model accepts, when known."""

    @property
    def tokenizer(self) -> Any:
        """The HuggingFace tokenizer (the kit's)."""
        return self.kit.tokenizer

    @property
    def tokenizer_info(self) -> xgr.TokenizerInfo:
        """Xgrammar's view of the tokenizer, aligned with the model's logits."""
        return self.kit.tokenizer_info

    @property
    def compile(self) -> Callable[[str], xgr.CompiledGrammar]:
        """The compiled grammar of a GBNF text, compiled once and cached (the kit's cache)."""
        return self.kit.compile

    @property
    def vocab(self) -> Vocabulary:
        """The vocabulary's token table (built on first use)."""
        return self.kit.vocab

    @property
    def stop_token_ids(self) -> list[int]:
        """Token ids that end an answer (the model's end-of-sequence ids)."""
        return self.kit.stop_token_ids

    @property
    def pad_token_id(self) -> int:
        """The padding token id (the first end-of-sequence id when the tokenizer has none)."""
        return self.kit.pad_token_id

    def prepare(self, request: GenerationRequest) -> Prepared:
        """Render and tokenize the prompt and check that it fits."""
        prompt_ids = prompt_token_ids(request, self.tokenizer)
        self._check_fits(request, len(prompt_ids))
        return Prepared(request, prompt_ids)

    @abc.abstractmethod
    def run(
        self,
        rows: Sequence[Prepared],
        *,
        streamer: BaseStreamer | None = None,
        cancel: threading.Event | None = None,
    ) -> Decoded:
        """Generate every row (rows sharing their ``decoding_key``).

        ``streamer`` receives the prompt, then each step's tokens (transformers' streamer
        protocol); ``cancel``, once set, ends the generation at the next step.
        """

    def finish(self, row: Prepared, ids: Sequence[int]) -> CitedAnswer:
        """The re-checked ``CitedAnswer`` of one row's generated ids."""
        stopped = bool(ids) and ids[-1] in self.stop_token_ids
        finish: FinishReason = "stop" if stopped else "length"
        return cited_answer(
            row.request, self.detokenize(ids), finish,
            prompt_tokens=len(row.prompt_ids), generated_tokens=len(ids),
        )

    def detokenize(self, token_ids: Sequence[int]) -> str:
        """Answer text of generated token ids: special tokens dropped, spacing as generated."""
        return self.kit.detokenize(token_ids)

    def steering(self, row: Prepared) -> RowSteering:
        """The steering of one constrained row: its grammar, quote guard and levers."""
        return self.kit.steering(row.request)

    def _check_fits(self, request: GenerationRequest, prompt_tokens: int) -> None:
        """Raise ``PromptTooLongError`` if the prompt and the token budget exceed the context."""
        limit = self.context_length
        if limit is None or prompt_tokens + request.max_new_tokens <= limit:
            return
        question_tokens = len(self.tokenizer(request.question, add_special_tokens=False).input_ids)
        if question_tokens + request.max_new_tokens > limit // 2:
            advice = "shorten the question, or lower max_new_tokens"
        elif request.history:
            advice = (
                f"pass fewer or shorter sources, fewer earlier turns (history holds "
                f"{len(request.history)}), or a smaller max_new_tokens"
            )
        else:
            advice = "pass fewer or shorter sources, or a smaller max_new_tokens"
        raise PromptTooLongError(
            f"the prompt is {prompt_tokens} tokens (the question {question_tokens}) and "
            f"max_new_tokens is {request.max_new_tokens}, but the model's context holds "
            f"{limit}; {advice}"
        )


class TransformersEngine(DecodingEngine):
    """A HuggingFace causal LM: every batch one left-padded ``model.generate`` call."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any = None,
        *,
        kit: TokenizerKit | None = None,
        grammar_cache_size: int = GRAMMAR_CACHE_SIZE,
        work_ahead: bool | None = None,
    ) -> None:
        """``model`` and its ``tokenizer``, or ``kit`` shared with other engines of its vocabulary.

        A new kit ends answers at ``stop_token_ids(model, tokenizer)`` and keeps
        ``grammar_cache_size`` compiled grammars. ``work_ahead``: whether each step's steering
        that reads no logits is made in a worker thread during the model's forward pass
        (``SteeringLogitsProcessor``); ``None``, where the model is not on the host or torch
        leaves a core free.
        """
        positions = getattr(model.config, "max_position_embeddings", None)
        super().__init__(
            kit_of(
                tokenizer, kit, vocab_size=int(model.config.vocab_size),
                stop_token_ids=lambda tokenizer: stop_token_ids(model, tokenizer),
                grammar_cache_size=grammar_cache_size,
            ),
            context_length=int(positions) if positions else None,
        )
        self.model = model
        self.work_ahead = work_ahead

    def run(
        self,
        rows: Sequence[Prepared],
        *,
        streamer: BaseStreamer | None = None,
        cancel: threading.Event | None = None,
    ) -> Decoded:
        """Generate every row of one batch in a single left-padded ``model.generate`` call."""
        check_one_batch(rows)
        request = rows[0].request
        stop = self.stop_token_ids
        width = max(len(row.prompt_ids) for row in rows)
        input_ids = torch.full((len(rows), width), self.pad_token_id, dtype=torch.long)
        attention = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            input_ids[i, width - len(row.prompt_ids):] = torch.tensor(row.prompt_ids)
            attention[i, width - len(row.prompt_ids):] = 1
        processor = None
        if request.constrained:
            processor = SteeringLogitsProcessor(
                [self.steering(row) for row in rows],
                vocab_size=self.tokenizer_info.vocab_size, stop_token_ids=stop,
                work_ahead=self.work_ahead,
            )
        sampling: dict[str, Any] = (
            {"do_sample": True, "temperature": request.temperature, "top_k": 0, "top_p": 1.0}
            if request.do_sample
            else {"do_sample": False, "temperature": None, "top_k": None, "top_p": None}
        )
        seeded = request.seed is not None
        rng = torch.random.fork_rng(devices=[]) if seeded else contextlib.nullcontext()
        device = self.model.device
        stopping = StoppingCriteriaList([CancelCriteria(cancel)] if cancel is not None else [])
        if processor is not None:
            stopping.append(processor.ahead)
            processor.watch(self.model)
        with rng, torch.inference_mode(), _closing(processor):
            if request.seed is not None:
                torch.manual_seed(request.seed)
            output = self.model.generate(
                input_ids=input_ids.to(device),
                attention_mask=attention.to(device),
                max_new_tokens=request.max_new_tokens,
                logits_processor=LogitsProcessorList([processor] if processor is not None else []),
                stopping_criteria=stopping,
                eos_token_id=stop,
                pad_token_id=self.pad_token_id,
                streamer=streamer,
                **sampling,
            )
        generated = output[:, width:].tolist()
        return Decoded(
            [_until_stop(ids, stop) for ids in generated],
            processor.seconds if processor is not None else [],
        )


def prompt_token_ids(request: GenerationRequest, tokenizer: Any) -> list[int]:
    """The token ids of the prompt the model is shown.

    The request's own prompt (its special tokens parsed: the caller wrote it whole), or its chat
    messages in the tokenizer's chat template. The messages' text (question, sources, history,
    instructions) is always tokenized as text: a ``<|im_start|>`` it spells out is the characters,
    never the template's special token, so it cannot forge a turn.
    """
    if request.prompt is not None:
        return list(tokenizer(request.prompt, add_special_tokens=False).input_ids)
    messages = request.messages()
    controls = _added_token_strings(tokenizer)
    if not any(control in message["content"] for message in messages for control in controls):
        prompt = render_prompt(messages, tokenizer)
        return list(tokenizer(prompt, add_special_tokens=False).input_ids)
    return _text_tokenized_apart(messages, tokenizer)


# Private-use characters: a placeholder for message i is "\ue000<i>\ue001".
_PLACEHOLDER = re.compile("\ue000(\\d+)\ue001")


def _added_token_strings(tokenizer: Any) -> list[str]:
    """The strings the tokenizer turns into its added (special) tokens wherever text holds them."""
    decoder = getattr(tokenizer, "added_tokens_decoder", None) or {}
    return [token.content for token in decoder.values() if getattr(token, "content", "")]


def _text_tokenized_apart(messages: list[dict[str, str]], tokenizer: Any) -> list[int]:
    """The prompt's ids, each message's content tokenized as text.

    The template's own parts are tokenized as the template means them. For messages whose text
    spells an added token (else the whole prompt is tokenized at once, as before).
    """
    held = [
        {**message, "content": f"\ue000{index}\ue001"} for index, message in enumerate(messages)
    ]
    pieces = _PLACEHOLDER.split(render_prompt(held, tokenizer))
    placed = [int(index) for index in pieces[1::2]]
    if sorted(placed) != list(range(len(messages))):
        raise TokenizerMismatchError(
            "the tokenizer's chat template changed the messages' text, so it cannot be "
            "tokenized apart from the template's special tokens; pass prompt= rendered yourself"
        )
    ids: list[int] = []
    for position, piece in enumerate(pieces):
        if position % 2:
            ids += tokenizer(
                messages[int(piece)]["content"], add_special_tokens=False,
                split_special_tokens=True,
            ).input_ids
        elif piece:
            ids += tokenizer(piece, add_special_tokens=False).input_ids
    return ids


@contextlib.contextmanager
def _closing(processor: SteeringLogitsProcessor | None) -> Iterator[None]:
    """Close ``processor`` (its hook, its worker thread) once ``generate`` returns or raises."""
    try:
        yield
    finally:
        if processor is not None:
            processor.close()


def _until_stop(ids: list[int], stop: Sequence[int]) -> list[int]:
    # After its stop token a finished row holds only padding.
    for position, token in enumerate(ids):
        if token in stop:
            return ids[: position + 1]
    return ids
