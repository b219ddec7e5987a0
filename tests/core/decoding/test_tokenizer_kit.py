"""TokenizerKit: one tokenizer's TokenizerInfo, compiled grammars, vocabulary and stop ids."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import xgrammar as xgr

from citeformer import InvalidInputError, TokenizerMismatchError, build_request
from citeformer.decoding.batching import Prepared
from citeformer.decoding.engine import DecodingEngine, TransformersEngine
from citeformer.decoding.steering import local_grammar
from citeformer.decoding.tokenizer_kit import TokenizerKit, stop_token_ids
from citeformer.decoding.vocab import Vocabulary
from tests.adversary import bracket_hungry_llama
from tests.tiny import tiny_tokenizer

SOURCES = ["Paris is the capital of France.", "Berlin is in Germany."]


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return tiny_tokenizer()


@pytest.fixture(scope="module")
def model(tokenizer: Any) -> torch.nn.Module:
    return bracket_hungry_llama(tokenizer)


def test_two_engines_on_one_kit_share_its_compiled_grammars(
    tokenizer: Any, model: torch.nn.Module
) -> None:
    kit = TokenizerKit(
        tokenizer, vocab_size=model.config.vocab_size,
        stop_token_ids=stop_token_ids(model, tokenizer),
    )
    first = TransformersEngine(model, kit=kit)
    second = TransformersEngine(bracket_hungry_llama(tokenizer, quote_boost=2.0), kit=kit)
    assert first.kit is second.kit is kit
    request = build_request("What is the capital of France?", SOURCES)
    first.steering(first.prepare(request))
    assert (kit.compile.cache_info().hits, kit.compile.cache_info().misses) == (0, 1)
    second.steering(second.prepare(request))  # the same grammar: compiled once, for both
    assert (kit.compile.cache_info().hits, kit.compile.cache_info().misses) == (1, 1)
    assert second.compile(local_grammar(request)) is first.compile(local_grammar(request))
    assert second.vocab is first.vocab


def test_an_engines_kit_holds_what_the_engine_built_before(
    tokenizer: Any, model: torch.nn.Module
) -> None:
    # What DecodingEngine built for itself: the ids, the TokenizerInfo, the table and the masks.
    engine = TransformersEngine(model, tokenizer)
    kit = engine.kit
    stop = stop_token_ids(model, tokenizer)
    info = xgr.TokenizerInfo.from_huggingface(
        tokenizer, vocab_size=model.config.vocab_size, stop_token_ids=stop
    )
    assert kit.stop_token_ids == engine.stop_token_ids == stop == [tokenizer.eos_token_id]
    assert kit.pad_token_id == engine.pad_token_id == stop[0]  # the tokenizer has no pad token
    assert engine.tokenizer is tokenizer and engine.tokenizer_info is kit.tokenizer_info
    assert kit.vocab_size == info.vocab_size == model.config.vocab_size
    assert kit.tokenizer_info.decoded_vocab == info.decoded_vocab
    assert kit.tokenizer_info.stop_token_ids == info.stop_token_ids
    assert kit.vocab.token_bytes == Vocabulary(info.decoded_vocab).token_bytes
    request = build_request("What is the capital of France?", SOURCES)
    steered = engine.steering(Prepared(request, []))
    before = xgr.GrammarMatcher(xgr.GrammarCompiler(info).compile_grammar(local_grammar(request)))
    masks = [xgr.allocate_token_bitmask(1, kit.vocab_size) for _ in range(2)]
    assert steered.matcher is not None
    for text in ("", "Paris is the capital", " of France [", "1"):
        for token in tokenizer(text, add_special_tokens=False).input_ids:
            steered.advance(token)
            assert before.accept_token(token)
        steered.matcher.fill_next_token_bitmask(masks[0])
        before.fill_next_token_bitmask(masks[1])
        assert torch.equal(masks[0], masks[1]), text


def test_a_kit_of_another_width_is_refused(tokenizer: Any, model: torch.nn.Module) -> None:
    kit = TokenizerKit(
        tokenizer, vocab_size=model.config.vocab_size + 64, stop_token_ids=[0]
    )
    with pytest.raises(TokenizerMismatchError, match="share a kit only between models"):
        TransformersEngine(model, kit=kit)


def test_a_kit_takes_no_other_tokenizer(tokenizer: Any, model: torch.nn.Module) -> None:
    kit = TransformersEngine(model, tokenizer).kit
    assert TransformersEngine(model, tokenizer, kit=kit).kit is kit
    with pytest.raises(InvalidInputError, match="not both"):
        TransformersEngine(model, tiny_tokenizer(), kit=kit)
    with pytest.raises(InvalidInputError, match="kit="):
        TransformersEngine(model)


def test_a_tokenizer_wider_than_the_logits_is_refused(tokenizer: Any) -> None:
    with pytest.raises(TokenizerMismatchError, match="cannot be aligned"):
        TokenizerKit(tokenizer, vocab_size=len(tokenizer) - 1, stop_token_ids=[0])


def test_an_unconstrained_request_has_no_steering(tokenizer: Any) -> None:
    kit = TokenizerKit(tokenizer, vocab_size=len(tokenizer), stop_token_ids=[0])
    with pytest.raises(InvalidInputError, match="no grammar to steer by"):
        kit.steering(build_request("Why?", SOURCES, constrained=False))


def test_an_engine_is_a_runtime_not_a_tokenizer_holder(tokenizer: Any) -> None:
    # The kit serves whoever only compiles (vLLM's processor); an engine must run a model.
    kit = TokenizerKit(tokenizer, vocab_size=len(tokenizer), stop_token_ids=[0])
    with pytest.raises(TypeError, match="abstract"):
        DecodingEngine(kit, context_length=None)  # type: ignore[abstract]
