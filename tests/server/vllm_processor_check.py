"""SteeringProcessor under both of vLLM's processor interfaces, against the in-process steering.

Run inside the vLLM venv by ``tests/server/test_vllm_processor.py``; prints one JSON object.
Model Runner V2 does not run on vLLM's CPU build (it needs Triton), so its interface is driven
here the way its model runner drives it (``add_request``, then ``apply(logits, ctx)`` with the
slots' committed tokens in ``req_states``), and V1's the way the CPU runner does
(``update_state(BatchUpdate)``, then ``apply(logits)`` with the running output list). At every
step the steered row must equal what ``citeformer.decoding.steering`` gives in process for the
same tokens, and the other row must be untouched.
"""

from __future__ import annotations

import json
import re
import sys
import time
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch
import xgrammar as xgr

from citeformer import Source, build_request
from citeformer.decoding.levers import Lever
from citeformer.decoding.payload import HANDSHAKE, HANDSHAKE_REPLY, PAYLOAD_KEY, steering_payload
from citeformer.decoding.steering import Steering, steering_for
from citeformer.decoding.vocab import Vocabulary
from citeformer.grammar.rules import marker_grammar

SOURCES = [
    Source("The Eiffel Tower was completed in March 1889.", title="Eiffel Tower"),
    Source("Gustave Eiffel's company designed and built the tower.", title="Eiffel company"),
]
ANSWER = "The Eiffel Tower was completed in March 1889 ["
PROMPT = [1, 9690, 198, 2683, 314]


def main(model_dir: str) -> None:
    from vllm import SamplingParams
    from vllm.config import ModelConfig
    from vllm.tokenizers import cached_tokenizer_from_config
    from vllm.v1.sample.logits_processor import BatchUpdate

    from citeformer.vllm import SteeringProcessor

    model_config = ModelConfig(model=model_dir, dtype="float32", max_model_len=2048)
    config = SimpleNamespace(model_config=model_config, speculative_config=None)
    tokenizer = cached_tokenizer_from_config(model_config)
    vocab_size = model_config.get_vocab_size()
    request = build_request("When was the Eiffel Tower completed?", SOURCES, max_new_tokens=32)
    payload = steering_payload(request)
    steered = SamplingParams(extra_args={PAYLOAD_KEY: payload})
    plain = SamplingParams()
    answer = list(tokenizer(ANSWER, add_special_tokens=False).input_ids)
    report: dict[str, Any] = {}

    # The in-process reference: the same request's steering over the same vocabulary.
    stop = [tokenizer.eos_token_id]
    info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size,
                                              stop_token_ids=stop)
    compiled = xgr.GrammarCompiler(info).compile_grammar(request.grammar_text(spell_quotes=False))
    reference = steering_for(request, Vocabulary.cached(info), stop,
                             matcher=xgr.GrammarMatcher(compiled))
    expected = []
    core = Steering(vocab_size)
    for step in range(len(answer) + 1):
        if step:
            reference.advance(answer[step - 1])
        logits = torch.zeros(1, vocab_size)
        core.apply(logits, [(0, reference)])
        expected.append(logits[0])

    # Model Runner V2: slot 2 steered, slot 0 plain, rows in the order of ctx.
    states = SimpleNamespace(
        prompt_len=SimpleNamespace(np=np.array([len(PROMPT)] * 3)),
        total_len=SimpleNamespace(gpu=torch.zeros(3, dtype=torch.long)),
        all_token_ids=SimpleNamespace(gpu=torch.zeros(3, 64, dtype=torch.long)),
    )
    v2 = SteeringProcessor(config, states)
    report["v2_added"] = [v2.add_request(2, steered), v2.add_request(0, plain)]
    v2.wait_prepared(timeout=60)
    states.all_token_ids.gpu[2, :len(PROMPT)] = torch.tensor(PROMPT)
    v2_equal = []
    for step in range(len(answer) + 1):
        states.total_len.gpu[2] = len(PROMPT) + step
        if step:
            states.all_token_ids.gpu[2, len(PROMPT) + step - 1] = answer[step - 1]
        logits = torch.zeros(2, vocab_size)
        v2.apply(logits, SimpleNamespace(expanded_idx_mapping=torch.tensor([0, 2])))
        v2_equal.append(bool(torch.equal(logits[1], expected[step]))
                        and bool(torch.equal(logits[0], torch.zeros(vocab_size))))
    report["v2_equal"] = v2_equal

    # Model Runner V1: the request at batch index 1, its output list growing in place.
    v1 = SteeringProcessor(config, torch.device("cpu"), False)
    outputs: list[int] = []
    v1.update_state(BatchUpdate(batch_size=2, removed=[], moved=[],
                                added=[(1, steered, PROMPT, outputs), (0, plain, PROMPT, [])]))
    v1.wait_prepared(timeout=60)
    v1_equal = []
    for step in range(len(answer) + 1):
        if step:
            outputs.append(answer[step - 1])
        v1.update_state(None)
        logits = torch.zeros(2, vocab_size)
        v1.apply(logits)
        v1_equal.append(bool(torch.equal(logits[1], expected[step]))
                        and bool(torch.equal(logits[0], torch.zeros(vocab_size))))
    report["v1_equal"] = v1_equal
    # After "[", only the ids 1..N (and what goes on to them) are left.
    allowed = torch.isfinite(expected[-1]).nonzero().flatten().tolist()
    report["allowed_after_open"] = sorted(tokenizer.convert_ids_to_tokens(allowed))
    # Moved, then removed: the steering follows the request, then lets the index go.
    v1.update_state(BatchUpdate(batch_size=2, removed=[], added=[],
                                moved=[(1, 0, _unidirectional())]))
    logits = torch.zeros(2, vocab_size)
    v1.apply(logits)
    report["moved_follows"] = bool(torch.equal(logits[0], expected[-1]))
    v1.update_state(BatchUpdate(batch_size=1, removed=[0], added=[], moved=[]))
    logits = torch.zeros(1, vocab_size)
    v1.apply(logits)
    report["removed_untouched"] = bool(torch.equal(logits[0], torch.zeros(vocab_size)))

    # A lever that raises ends its own request (only the end-of-answer tokens are left).
    class Raises(Lever):
        def edit(self, state: Any, edits: Any) -> None:
            raise RuntimeError("on purpose")

    failing = SteeringProcessor(config, torch.device("cpu"), False)
    failing.update_state(BatchUpdate(batch_size=2, removed=[], moved=[],
                                     added=[(0, steered, PROMPT, []), (1, steered, PROMPT, [])]))
    failing.wait_prepared(timeout=60)
    failing._answers[0].steering.result().levers = (Raises(),)
    logits = torch.zeros(2, vocab_size)
    failing.apply(logits)
    report["failed_row_kept"] = torch.isfinite(logits[0]).nonzero().flatten().tolist()
    report["stop_ids"] = stop
    report["other_row_steered"] = bool(torch.equal(logits[1], expected[0]))

    # validate_params: the frontend's check, a ValueError vLLM answers with HTTP 400.
    said = []
    # Numbers past their range: a weight whose product overflows float32, a 400-digit int.
    heavy = {**json.loads(payload), "evidence": {"name": "lexical", "weight": 1e308}}
    huge = {**json.loads(payload), "readability": {"end_bias": 10**400}}
    for extra in ({PAYLOAD_KEY: payload}, {}, {PAYLOAD_KEY: HANDSHAKE}, {PAYLOAD_KEY: "{"},
                  {PAYLOAD_KEY: json.dumps(heavy)}, {PAYLOAD_KEY: json.dumps(huge)}):
        try:
            SteeringProcessor.validate_params(SamplingParams(extra_args=extra))
            said.append("ok")
        except ValueError as error:
            said.append(str(error))
    report["validate"] = said
    report["handshake_reply"] = HANDSHAKE_REPLY
    try:
        SteeringProcessor(SimpleNamespace(model_config=model_config, speculative_config=object()),
                          torch.device("cpu"), False)
        report["speculative"] = "accepted"
    except ValueError as error:
        report["speculative"] = str(error)
    report.update(slow_compile(config, tokenizer, steered, request, reference_of=lambda: (
        steering_for(request, Vocabulary.cached(info), stop, matcher=xgr.GrammarMatcher(compiled))
    )))
    print(json.dumps(report))


SLOW_COMPILE_S = 2.0
STEP_S = 0.01


def slow_compile(
    config: Any, tokenizer: Any, steered: Any, request: Any, reference_of: Any
) -> dict[str, Any]:
    """A request whose grammar compiles for ``SLOW_COMPILE_S`` beside one already running.

    The engine is played as V1's CPU runner plays it: a step of ``STEP_S`` (the forward pass),
    then ``update_state`` and ``apply``; each row's greedy token is appended to its output.
    """
    from vllm.v1.sample.logits_processor import BatchUpdate

    from citeformer.vllm import SteeringProcessor

    processor = SteeringProcessor(config, torch.device("cpu"), False)
    running: list[int] = []
    processor.update_state(BatchUpdate(batch_size=1, removed=[], moved=[],
                                       added=[(0, steered, PROMPT, running)]))
    processor.wait_prepared(timeout=60)
    fast = processor._kit.compile

    def slow(grammar: str) -> Any:
        time.sleep(SLOW_COMPILE_S)
        return fast(grammar)

    processor._kit.compile = slow  # type: ignore[method-assign]
    waiting: list[int] = []
    processor.update_state(BatchUpdate(batch_size=2, removed=[], moved=[],
                                       added=[(1, steered, PROMPT, waiting)]))
    generator = torch.Generator().manual_seed(0)
    vocab_size = processor._steering._vocab_size
    # vLLM's own structured output: the markers' grammar, applied before any processor.
    markers = fast(marker_grammar(request.n_sources, request.grammar.max_group))
    vllm_grammar = [xgr.GrammarMatcher(markers), xgr.GrammarMatcher(markers)]
    bitmask = xgr.allocate_token_bitmask(2, vocab_size)
    durations, rows_equal = [], []
    answer = processor._answers[1]
    started = time.monotonic()
    ready_after = 0.0
    for _ in range(int(4 * SLOW_COMPILE_S / STEP_S)):
        time.sleep(STEP_S)
        processor.update_state(None)
        logits = torch.randn(2, vocab_size, generator=generator)
        for row, matcher in enumerate(vllm_grammar):
            matcher.fill_next_token_bitmask(bitmask, row)
        xgr.apply_token_bitmask_inplace(logits, bitmask)
        steering = answer.steered is not None
        if steering:  # steered: its row as the in-process steering gives it
            reference = reference_of()
            for token in waiting:
                reference.advance(token)
            expected = logits[1:].clone()
            Steering(vocab_size).apply(expected, [(0, reference)])
        began = time.perf_counter()
        processor.apply(logits)
        if not steering:
            durations.append(time.perf_counter() - began)
            ready_after = time.monotonic() - started
        else:
            rows_equal.append(bool(torch.equal(logits[1], expected[0])))
        for row, output in ((0, running), (1, waiting)):
            token = int(logits[row].argmax())
            if token not in processor._stop_ids:  # an end is not written: the row goes on
                assert vllm_grammar[row].accept_token(token)
                output.append(token)
        if len(rows_equal) >= 5:
            break
    # The tokens written while the grammar compiled: every one accepted by the full grammar.
    text = tokenizer.decode(waiting)
    full = xgr.GrammarMatcher(
        xgr.GrammarCompiler(xgr.TokenizerInfo([])).compile_grammar(
            request.grammar_text(spell_quotes=True)
        ),
        terminate_without_stop_token=True,
    )
    return {
        "slow_ready_after_s": ready_after,
        "slow_steps": len(durations),
        "slow_max_apply_s": max(durations),
        "slow_written_accepted": bool(full.accept_string(text.encode())),
        "slow_markers": sorted({int(k) for k in re.findall(r"\[(\d+)\]", text)}),
        "slow_steered_equal": rows_equal,
        "slow_left": answer.left,
        "n_sources": request.n_sources,
    }


def _unidirectional() -> Any:
    from vllm.v1.sample.logits_processor import MoveDirectionality

    return MoveDirectionality.UNIDIRECTIONAL


if __name__ == "__main__":
    main(sys.argv[1])
