"""The steering core never leaves a token the grammar forbids finite, whatever the options.

A property test: requests with random options, each anywhere in its checked range (weights,
biases and penalties up to ``MAX_BIAS``, counts up to ``MAX_COUNT``), are steered for several
steps over random logits that include huge finite ones (+-3e38), and tokens drawn among those the
steering left, markers' openers often, so that the states include open markers. After every step,
each token that a fresh matcher of the request's full grammar (the text a serving engine is sent:
words bounded, verbatim quotes spelled out) forbids must be -inf, and no logit may be NaN or +inf.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch
import xgrammar as xgr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from citeformer import GenerationRequest, build_request
from citeformer.decoding.edits import Wanted, WantedReader
from citeformer.decoding.steering import Steering, local_grammar, steering_for
from citeformer.decoding.tokenizer_kit import TokenizerKit
from citeformer.errors import MAX_BIAS
from citeformer.evidence import LexicalEvidence
from citeformer.evidence.refusal import Refusal
from citeformer.readability import MAX_COUNT, Readability
from tests.tiny import tiny_tokenizer
from tests.vocab import steering_kit

QUESTION = "When was the Eiffel Tower in Paris completed, and how tall is it?"
SOURCES = [
    "The Eiffel Tower in Paris was completed on 31 March 1889.",
    "It is 330 metres tall, the tallest structure in Paris.",
    "Berlin is the capital of Germany.",
]
HUGE = 3e38
"""A finite float32 logit close to the largest (3.4e38)."""
ROWS = 2
STEPS = 14


@pytest.fixture(autouse=True, scope="module")
def one_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tiny_kit() -> TokenizerKit:
    return steering_kit(tiny_tokenizer())


@pytest.fixture(scope="module")
def smollm2_kit(embedded_tokenizer: Any) -> TokenizerKit:
    return steering_kit(embedded_tokenizer)


def bias() -> st.SearchStrategy[float]:
    return st.floats(0.0, MAX_BIAS)


def share() -> st.SearchStrategy[float | None]:
    return st.none() | st.floats(0.0, 1.0)


def count(low: int = 0) -> st.SearchStrategy[int]:
    # The ends of the range and small values, where the levers act within a few steps.
    return st.sampled_from([low, MAX_COUNT]) | st.integers(low, 8)


readabilities = st.builds(
    Readability,
    end_intent=st.booleans(), auto_cite_support=share(),
    no_repeat_ngram=st.just(0) | count(2), no_repeat_words=st.just(0) | count(2),
    max_punctuation_run=count(), number_penalty=bias(), code_penalty=bias(),
    cite_after_punctuation=st.booleans(), cite_closed=st.booleans(),
    min_claim_words=count(), clause_support=share(), period_after_marker=st.booleans(),
    end_bias=bias(), wrap_up_words=count(), wrap_up_bias=bias(),
)
evidences = st.none() | st.builds(
    LexicalEvidence, weight=st.floats(1e-6, MAX_BIAS), question_weight=bias()
)
requests = st.builds(
    build_request,
    st.just(QUESTION), st.just(SOURCES), st.sampled_from(["required", "auto", "quotes_only"]),
    readability=readabilities, evidence=evidences,
    refusal=st.sampled_from([None, Refusal(threshold=0.0, offer_below=float("inf"))]),
    max_group=st.integers(1, 3), max_sentence_words=st.integers(2, 12),
    max_word_chars=st.integers(10, 32), min_quote_chars=st.integers(1, 8),
)


def steer_and_check(
    kit: TokenizerKit, request: GenerationRequest, seed: int, opener_share: float
) -> None:
    """Steer ``ROWS`` answers of ``request`` for ``STEPS`` steps; check every step's logits."""
    rng = np.random.default_rng(seed)
    local = kit.compile(local_grammar(request))
    full = kit.compile(request.grammar_text(spell_quotes=True))
    rows = [
        steering_for(request, kit.vocab, kit.stop_token_ids, matcher=xgr.GrammarMatcher(local))
        for _ in range(ROWS)
    ]
    references = [xgr.GrammarMatcher(full) for _ in range(ROWS)]
    size = kit.vocab_size
    steering = Steering(size)
    bitmask = xgr.allocate_token_bitmask(1, size)
    openers = set(kit.vocab.openers.tolist())
    live = list(range(ROWS))
    for _ in range(STEPS):
        if not live:
            break
        logits = torch.from_numpy(random_logits(rng, size))
        pairs = [(i, rows[i]) for i in live]
        # Made ahead, as beside a host model (the mask's few forbidden ids listed, removals
        # known ahead in its write), and in the step: the same logits.
        ahead = logits.clone()
        steering.apply(ahead, pairs, masks=steering.prepare(pairs, ahead=True))
        steering.apply(logits, pairs)
        assert torch.equal(ahead, logits), "the steering made ahead differs from the step's"
        assert not torch.isnan(logits).any(), "a logit is NaN after the steering"
        # +inf would make NaN of a sampler's softmax (inf - inf).
        assert not torch.isposinf(logits).any(), "a logit is +inf after the steering"
        for i in list(live):
            references[i].fill_next_token_bitmask(bitmask)
            allowed = torch.from_numpy(
                np.unpackbits(bitmask.numpy()[0].view(np.uint8), bitorder="little")[:size]
                .astype(bool)
            )
            leaked = torch.nonzero(~allowed & (logits[i] != float("-inf"))).flatten().tolist()
            assert not leaked, (
                f"tokens the grammar forbids are left finite after "
                f"{rows[i].state.text!r}: {[kit.vocab.token_bytes[t] for t in leaked[:5]]}"
            )
            left = torch.nonzero(torch.isfinite(logits[i])).flatten().tolist()
            assert left, f"the steering left no token after {rows[i].state.text!r}"
            marking = [t for t in left if t in openers]
            pool = marking if marking and rng.random() < opener_share else left
            token = int(pool[rng.integers(len(pool))])
            if token in kit.stop_token_ids:
                live.remove(i)
                continue
            assert references[i].accept_token(token)
            rows[i].advance(token)


def random_logits(rng: np.random.Generator, size: int) -> np.ndarray:
    """A batch of float32 logits: ordinary ones, with some of +-3e38 and some of +-1e30."""
    logits = (rng.standard_normal((ROWS, size)) * rng.choice([1.0, 30.0])).astype(np.float32)
    for magnitude in (HUGE, 1e30):
        picked = rng.random((ROWS, size)) < 0.02
        logits[picked] = rng.choice([-magnitude, magnitude], size=int(picked.sum()))
    return logits


def examples(count: int) -> Any:
    """Hypothesis settings of these tests: ``count`` examples, the same ones every run."""
    return settings(
        max_examples=count, deadline=None, derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


steered = given(
    request=requests, seed=st.integers(0, 2**32 - 1), opener_share=st.sampled_from([0.3, 0.8])
)


@examples(30)
@steered
def test_forbidden_tokens_stay_masked_and_no_logit_is_nan(
    tiny_kit: TokenizerKit, request: GenerationRequest, seed: int, opener_share: float
) -> None:
    steer_and_check(tiny_kit, request, seed, opener_share)


@pytest.mark.integration
@examples(8)
@steered
def test_forbidden_tokens_stay_masked_on_the_embedded_tokenizer(
    smollm2_kit: TokenizerKit, request: GenerationRequest, seed: int, opener_share: float
) -> None:
    steer_and_check(smollm2_kit, request, seed, opener_share)


def test_several_rows_fill_on_one_thread_beside_a_host_model(
    tiny_kit: TokenizerKit, monkeypatch: pytest.MonkeyPatch
) -> None:
    # torch's threads still hold the cores after the model's forward pass on the host: a pool
    # beside them is slower than one thread. Beside an accelerator, torch's count is taken.
    pools: list[int] = []

    class Counted(xgr.BatchGrammarMatcher):  # type: ignore[misc]
        def __init__(self, threads: int) -> None:
            pools.append(threads)
            super().__init__(threads)

    monkeypatch.setattr(xgr, "BatchGrammarMatcher", Counted)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 4)
    request = build_request("Where is Paris?", ["Paris is in France.", "Lyon too."])
    local = tiny_kit.compile(local_grammar(request))

    def rows() -> list[tuple[int, Any]]:
        return [(i, steering_for(request, tiny_kit.vocab, tiny_kit.stop_token_ids,
                                 matcher=xgr.GrammarMatcher(local))) for i in range(2)]

    steering = Steering(tiny_kit.vocab_size)
    steering.apply(torch.zeros(2, tiny_kit.vocab_size), rows())
    assert pools == [1]
    steering._on_host = False  # as after an accelerator's logits
    host_made = steering.prepare(rows())
    assert pools == [1, 4] and host_made.plan is not None


def test_rows_whose_mask_allows_no_marker_opener_are_not_read_and_steer_the_same(
    tiny_kit: TokenizerKit, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The levers that read the model's scores act only where a marker may open: inside a
    # marker the scores are not read, and the logits come out as if they had been.
    request = build_request(QUESTION, SOURCES)
    local = tiny_kit.compile(local_grammar(request))
    answer = tiny_kit.tokenizer(
        "The Eiffel Tower was completed in 1889 [1]. It is 330 metres tall [2].",
        add_special_tokens=False,
    ).input_ids
    generator = torch.Generator().manual_seed(0)
    steps = [torch.randn(1, tiny_kit.vocab_size, generator=generator) * 4
             for _ in range(len(answer) + 1)]

    may_open: list[bool] = []  # what the reader says at each step where every row is read
    read = WantedReader.read

    def reading(reader: WantedReader, *args: Any, **kwargs: Any) -> dict[int, Wanted]:
        found = read(reader, *args, **kwargs)
        may_open.append(found[0].may_open)
        return found

    def steered(skip: bool) -> tuple[list[torch.Tensor], list[bool]]:
        if not skip:
            monkeypatch.setattr(Steering, "_closed", lambda *args: frozenset())
            monkeypatch.setattr(WantedReader, "read", reading)
        row = steering_for(request, tiny_kit.vocab, tiny_kit.stop_token_ids,
                           matcher=xgr.GrammarMatcher(local))
        steering, out, closed = Steering(tiny_kit.vocab_size), [], []
        for k, logits in enumerate(steps):
            if k:
                row.advance(answer[k - 1])
            masks = steering.prepare([(0, row)])
            closed.append(0 in masks.closed)
            scores = logits.clone()
            steering.apply(scores, [(0, row)], masks=masks)
            out.append(scores)
        monkeypatch.undo()
        return out, closed

    (skipped, closed), (read, never) = steered(True), steered(False)
    # Closed exactly where the reader finds no opener allowed: inside the two markers.
    assert may_open == [not shut for shut in closed] and 2 <= closed.count(True) < len(closed)
    assert not any(never)
    for k, (a, b) in enumerate(zip(skipped, read, strict=True)):
        assert torch.equal(a, b), k
