"""One tokenizer's resources for constrained decoding, built once and shared by every engine."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Sequence
from typing import Any

import xgrammar as xgr

from citeformer.decoding.steering import RowSteering, local_grammar, steering_for
from citeformer.decoding.vocab import Vocabulary
from citeformer.errors import InvalidInputError, TokenizerMismatchError
from citeformer.request import GenerationRequest

__all__ = [
    "GRAMMAR_CACHE_SIZE",
    "TokenizerKit",
    "answer_text",
    "end_of_sequence_ids",
    "kit_of",
    "stop_token_ids",
]

GRAMMAR_CACHE_SIZE = 64
"""Compiled grammars kept per kit (least recently used dropped first); one is about 1 MB."""


class TokenizerKit:
    """What constrained decoding needs of one tokenizer beside the model, built once per vocabulary.

    The tokenizer, xgrammar's ``TokenizerInfo`` aligned with the model's logits, one
    ``GrammarCompiler`` and a cache of the last ``grammar_cache_size`` compiled grammars (keyed by
    grammar text), the vocabulary's token table, and the stop and pad ids. Every engine
    (``TransformersEngine``, ``citeformer.llama_cpp.LlamaCppEngine``) and vLLM's
    ``SteeringProcessor`` hold one; engines over the same vocabulary may share one, and with it
    every grammar compiled. It may be used from several threads: the cache is a
    ``functools.lru_cache`` (two threads missing the same grammar at once both compile it) and
    the vocabulary's table is built once under a lock.

    ``vocab_size`` is the width of the model's logits, never ``tokenizer.vocab_size``: a
    narrower mask would shift every token id after the gap.

    Instantiate:
        ```python
        from citeformer.decoding.tokenizer_kit import TokenizerKit, stop_token_ids
        kit = TokenizerKit(tokenizer, vocab_size=model.config.vocab_size,
                           stop_token_ids=stop_token_ids(model, tokenizer))
        engine = TransformersEngine(model, kit=kit)
        gguf = LlamaCppEngine(llama_cpp.Llama("model.gguf"), kit=kit)  # the same grammars
        engine.kit.compile(grammar_text)                    # compiled once for both
        ```
    """

    def __init__(
        self,
        tokenizer: Any,
        *,
        vocab_size: int,
        stop_token_ids: Sequence[int],
        grammar_cache_size: int = GRAMMAR_CACHE_SIZE,
    ) -> None:
        if len(tokenizer) > vocab_size:
            raise TokenizerMismatchError(
                f"the tokenizer has {len(tokenizer)} tokens but the model has logits for only "
                f"{vocab_size}; the grammar mask cannot be aligned. Use the tokenizer that was "
                "trained with this model."
            )
        self.tokenizer = tokenizer
        self.stop_token_ids = list(stop_token_ids)
        """Token ids that end an answer (the model's end-of-sequence ids)."""
        pad = tokenizer.pad_token_id
        self.pad_token_id = int(pad if pad is not None else self.stop_token_ids[0])
        """The padding token id (the first end-of-sequence id when the tokenizer has none)."""
        self.tokenizer_info = xgr.TokenizerInfo.from_huggingface(
            tokenizer, vocab_size=vocab_size, stop_token_ids=self.stop_token_ids
        )
        """Xgrammar's view of the tokenizer, aligned with the model's logits."""
        self._compiler = xgr.GrammarCompiler(self.tokenizer_info)
        self.compile = functools.lru_cache(maxsize=grammar_cache_size)(
            self._compiler.compile_grammar
        )
        """The compiled grammar of a GBNF text, compiled once and cached."""
        self._vocab: Vocabulary | None = None
        self._vocab_lock = threading.Lock()

    @property
    def vocab_size(self) -> int:
        """The width of the model's logits the masks are built for."""
        return int(self.tokenizer_info.vocab_size)

    @property
    def vocab(self) -> Vocabulary:
        """The vocabulary's token table (built on first use)."""
        with self._vocab_lock:
            if self._vocab is None:
                self._vocab = Vocabulary.cached(self.tokenizer_info)
            return self._vocab

    def steering(self, request: GenerationRequest) -> RowSteering:
        """The steering of one constrained request: its grammar, quote guard and levers."""
        if not request.constrained:
            raise InvalidInputError("an unconstrained row has no grammar to steer by")
        compiled = self.compile(local_grammar(request))
        return steering_for(
            request, self.vocab, self.stop_token_ids, matcher=xgr.GrammarMatcher(compiled)
        )

    def detokenize(self, token_ids: Sequence[int]) -> str:
        """Answer text of generated token ids: special tokens dropped, spacing as generated."""
        return answer_text(self.tokenizer, token_ids, self.stop_token_ids)


def kit_of(
    tokenizer: Any,
    kit: TokenizerKit | None,
    *,
    vocab_size: int,
    stop_token_ids: Callable[[Any], Sequence[int]],
    grammar_cache_size: int,
) -> TokenizerKit:
    """An engine's kit: ``kit`` when given (checked against the model's logits), else a new one.

    A new one ends answers at ``stop_token_ids(tokenizer)`` and keeps ``grammar_cache_size``
    compiled grammars; a given kit keeps its own.
    """
    if kit is None:
        if tokenizer is None:
            raise InvalidInputError(
                "pass the model's tokenizer, or kit= a TokenizerKit of its vocabulary"
            )
        return TokenizerKit(
            tokenizer, vocab_size=vocab_size, stop_token_ids=stop_token_ids(tokenizer),
            grammar_cache_size=grammar_cache_size,
        )
    if tokenizer is not None and tokenizer is not kit.tokenizer:
        raise InvalidInputError(
            "pass a tokenizer or kit=, not both: the kit holds its own tokenizer"
        )
    if kit.vocab_size != vocab_size:
        raise TokenizerMismatchError(
            f"the kit's masks are {kit.vocab_size} tokens wide but the model has logits for "
            f"{vocab_size}; share a kit only between models of the same vocabulary"
        )
    return kit


def end_of_sequence_ids(*values: object) -> list[int]:
    """The ids among ``values`` (each an id, a list of ids or ``None``), in order, each once."""
    ids: list[int] = []
    for value in values:
        if isinstance(value, int):
            ids.append(value)
        elif isinstance(value, (list, tuple)):
            ids.extend(int(v) for v in value)
    return list(dict.fromkeys(ids))


def stop_token_ids(model: Any, tokenizer: Any) -> list[int]:
    """The ids that end an answer: the generation config's, then the tokenizer's end of sequence."""
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids = end_of_sequence_ids(configured, tokenizer.eos_token_id)
    if not ids:
        raise TokenizerMismatchError(
            "neither the tokenizer nor the model's generation config names an end-of-sequence "
            "token, so the model could never end an answer; set tokenizer.eos_token"
        )
    return ids


def answer_text(tokenizer: Any, token_ids: Sequence[int], stop_ids: Sequence[int]) -> str:
    """Answer text of generated token ids: stop and special tokens dropped, spacing kept."""
    stop = set(stop_ids)
    return tokenizer.decode(  # type: ignore[no-any-return]
        [t for t in token_ids if t not in stop],
        skip_special_tokens=True, clean_up_tokenization_spaces=False,
    )
