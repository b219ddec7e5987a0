"""The steering core as a transformers logits processor: which rows are advanced and steered."""

from __future__ import annotations

import torch
import xgrammar as xgr

from citeformer import CiteGenerator, Policy
from citeformer.decoding.edits import StepEdits
from citeformer.decoding.hf import SteeringLogitsProcessor
from citeformer.decoding.levers import AnswerState, Lever
from citeformer.decoding.steering import RowSteering
from tests.adversary import bracket_hungry_llama
from tests.tiny import tiny_tokenizer


class Recorder(Lever):
    """Records the answer tokens of its row each time it acts."""

    def __init__(self, seen: list[list[int]]) -> None:
        self.seen = seen

    def edit(self, state: AnswerState, edits: StepEdits) -> None:
        self.seen.append(list(state.tokens))


def test_a_finished_row_is_neither_fed_nor_masked() -> None:
    tokenizer = tiny_tokenizer()
    tokenizer.add_special_tokens({"pad_token": "<pad>"})
    gen = CiteGenerator(bracket_hungry_llama(tokenizer, quote_boost=6.0), tokenizer)
    compiled = gen.compiled_grammar(2, Policy.REQUIRED)
    vocab = gen.engine.vocab
    seen: list[list[list[int]]] = [[], []]
    processor = SteeringLogitsProcessor(
        [RowSteering(vocab, matcher=xgr.GrammarMatcher(compiled), levers=[Recorder(seen[row])])
         for row in range(2)],
        vocab_size=gen.tokenizer_info.vocab_size, stop_token_ids=gen.stop_token_ids,
    )
    first = tokenizer("Paris [1].", add_special_tokens=False).input_ids
    second = tokenizer("Paris is the capital of France", add_special_tokens=False).input_ids
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    # Row 0 writes a sentence and stops, then gets padding; row 1 goes on.
    columns = list(zip([*first, eos, pad, pad], second[: len(first) + 3], strict=True))
    ids = torch.zeros((2, 4), dtype=torch.long)
    width = gen.tokenizer_info.vocab_size
    processor(ids, torch.zeros(2, width))
    for column in columns:
        ids = torch.cat([ids, torch.tensor(column).unsqueeze(1)], dim=1)
        out = processor(ids, torch.zeros(2, width))
    assert torch.equal(out[0], torch.zeros(width))  # no mask work on the finished row
    assert not torch.isfinite(out[1]).all()  # the other row is still masked ("[" cannot open)
    # Each row's levers saw its own answer, row 0's never past its last token before the stop.
    assert seen[0] == [first[:end] for end in range(len(first) + 1)]
    assert seen[1] == [second[:end] for end in range(len(first) + 4)]
    assert len(processor.seconds) == len(columns) + 1
