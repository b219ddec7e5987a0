"""One step's edits over a batch: the same logits as each lever writing its own, row by row."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import xgrammar as xgr

from citeformer.decoding import edits as edits_module
from citeformer.decoding import wanted as wanted_module
from citeformer.decoding.edits import StepEdits, WantedReader, host_view
from citeformer.decoding.levers import (
    AnswerState,
    CiteAfterWord,
    CiteClosed,
    ClaimWords,
    ClauseEnd,
    EndBias,
    EndIntent,
    Lever,
    NumberCopy,
    PeriodAfterMarker,
    PunctuationRun,
    RepeatBlock,
    WordRepeatBlock,
    WrapUp,
)
from citeformer.decoding.masks import MaskPlan, apply_bitmask
from citeformer.decoding.steering import RowSteering, _edit_all
from citeformer.decoding.vocab import Vocabulary
from citeformer.evidence import LexicalEvidence
from citeformer.types import Source


@pytest.fixture(autouse=True, params=["host", "host-batched", "torch"])
def logits_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Host float logits are read and written through numpy, a few edits one by one and more in
    batched writes; every test also runs the batched way and torch's way, the one 16-bit floats
    and an accelerator's logits take."""
    if request.param == "host-batched":
        monkeypatch.setattr(edits_module, "_FEW_EDITS", 0)
    if request.param == "torch":
        monkeypatch.setattr(edits_module, "host_view", lambda logits: None)
        monkeypatch.setattr(wanted_module, "host_view", lambda logits: None)


VOCAB = [
    b"<eos>", b"Paris", b" is", b" [", b"[", b"1", b"]", b".", b".\n", b",", b" in", b"8",
    b"9", b" 18", b"7", b"!", b" the", b" ", b" capital", b" France", b" (",
]
TOKENS = Vocabulary(VOCAB)
TOKEN = {raw.decode(): index for index, raw in enumerate(VOCAB)}
NEG = float("-inf")

QUESTION = "Where is Paris?"
SUPPORT = LexicalEvidence().bind(QUESTION, [Source("Paris is the capital of France.")])

ANSWERS = [
    ("Paris", " is", " the", " capital", " is", " the"),
    ("Paris", " is", " 18", ","),
    ("Paris", " [", "1", "]"),
    ("Paris", " is", " the", " capital", " [", "1", "]", ".", " Paris", " is"),
]


def levers() -> list[Lever]:
    return [
        EndIntent(TOKENS, required=True),
        CiteAfterWord(TOKENS),
        ClaimWords(TOKENS, 3),
        ClauseEnd(TOKENS, SUPPORT, QUESTION, threshold=0.5, min_words=3),
        PeriodAfterMarker(TOKENS),
        NumberCopy(TOKENS, ["Paris is 18 km wide."], 2.0),
        RepeatBlock(2, TOKENS.exempt),
        WordRepeatBlock(3, TOKENS, [0]),
        WrapUp(TOKENS, 4, 2, 0.5),
        EndBias([0], 1.5),
    ]


def every_lever() -> list[Lever]:
    """``levers`` and those that steer many rows in one call."""
    return [*levers(), CiteClosed(TOKENS), PunctuationRun(TOKENS, 2)]


def state_of(answer: tuple[str, ...]) -> AnswerState:
    state = AnswerState(TOKENS.token_bytes)
    for text in answer:
        state.append(TOKEN[text.strip()] if text.strip() == "Paris" else TOKEN[text])
    return state


def masked_scores(rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Random scores and the same after a mask that leaves a few tokens in some rows."""
    generator = torch.Generator().manual_seed(3)
    raw = torch.randn(rows, len(VOCAB), generator=generator) * 3
    masked = raw.clone()
    masked[1, 5:] = NEG  # few tokens left: removals may empty the row
    masked[2, [TOKEN[" the"], TOKEN[" capital"]]] = NEG
    return raw, masked


def one_lever_at_a_time(
    answer: tuple[str, ...], raw: torch.Tensor, masked: torch.Tensor
) -> list[float]:
    """Each lever writing its own row in turn: what the steering did before the batch edits."""
    out = masked.clone()
    state = state_of(answer)
    for lever in levers():
        lever.apply(state, out, raw)
    return out[0].tolist()  # type: ignore[no-any-return]


def test_a_batch_of_edits_equals_each_lever_on_its_own_row() -> None:
    raw, masked = masked_scores(len(ANSWERS))
    reader = WantedReader(TOKENS.enders, TOKENS.openers, raw.device, chainers=TOKENS.chainers)
    rows = list(range(len(ANSWERS)))
    edits = StepEdits(reader.after(reader.before(raw, rows), masked, rows))
    out = masked.clone()
    for row, answer in enumerate(ANSWERS):
        edits.row = row
        state = state_of(answer)
        for lever in levers():
            lever.edit(state, edits)
    edits.apply(out)
    for row, answer in enumerate(ANSWERS):
        expected = one_lever_at_a_time(answer, raw[row : row + 1], masked[row : row + 1])
        assert out[row].tolist() == expected, (row, answer)


def test_levers_steering_many_rows_at_once_ask_what_each_row_asks_alone() -> None:
    # Enough rows for the batched classes to steer them in one call, some with few tokens left
    # (their removals may empty them), half with the masks' count known.
    answers = [*ANSWERS, ("Paris", " (", "1"), ("Paris", " is", ".", ".", "."), *ANSWERS]
    raw, _ = masked_scores(len(answers))
    masked = raw.clone()
    for row in range(0, len(answers), 3):
        masked[row, 5:] = NEG
    reader = WantedReader(TOKENS.enders, TOKENS.openers, raw.device, chainers=TOKENS.chainers)
    rows = list(range(len(answers)))
    allowed = {row: int(torch.isfinite(masked[row]).sum()) for row in rows if row % 2}
    edits = StepEdits(reader.after(reader.before(raw, rows), masked, rows), allowed)
    steered = []
    for answer in answers:
        row = RowSteering(TOKENS, levers=every_lever())
        row.state = state_of(answer)
        steered.append(row)
    assert any(lever.batched for lever in steered[0].levers)
    _edit_all(edits, list(enumerate(steered)), on_error=None)
    out = masked.clone()
    edits.apply(out)
    for row, answer in enumerate(answers):
        alone = masked[row : row + 1].clone()
        state = state_of(answer)
        for lever in every_lever():
            lever.apply(state, alone, raw[row : row + 1])
        assert out[row].tolist() == alone[0].tolist(), (row, answer)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_removals_keep_a_token_as_levers_acting_in_turn_would(dtype: torch.dtype) -> None:
    scores = torch.full((2, len(VOCAB)), NEG, dtype=dtype)
    scores[:, [1, 2, 3]] = torch.tensor([1.5, 2.25, 3.125], dtype=dtype)
    edits = StepEdits(allowed={0: 3})
    edits.row = 0
    edits.remove([1])
    edits.remove([2, 3])  # with the first, nothing is left: this one is not made
    edits.row = 1
    edits.remove([1, 2])
    edits.remove([3])  # the second would empty the row
    edits.apply(scores)
    assert torch.isfinite(scores[0]).tolist() == [i in (2, 3) for i in range(len(VOCAB))]
    assert torch.isfinite(scores[1]).tolist() == [i == 3 for i in range(len(VOCAB))]
    # The tokens a removal left are put back as they were; row 1's count was not given.
    assert scores[0, [2, 3]].tolist() == [2.25, 3.125] and scores[1, 3].item() == 3.125


def test_removals_the_masks_leave_room_for_are_made_in_one_write() -> None:
    scores = torch.zeros(2, 6)
    edits = StepEdits(allowed={0: 6, 1: 6})  # far more tokens than the removals take
    edits.remove([1, 2])
    edits.remove_rows([0, 1], [4])
    edits.apply(scores)
    assert torch.isfinite(scores).tolist() == [
        [i not in (1, 2, 4) for i in range(6)], [i != 4 for i in range(6)]
    ]


def test_additions_reach_each_logit_in_the_order_the_levers_made_them() -> None:
    scores = torch.zeros(1, 4)
    edits = StepEdits()
    edits.add([1, 2], 1e8)
    edits.add([1], -1e8)
    edits.add([1, 3], torch.tensor([1.0, 5.0]))
    edits.apply(scores)
    # In float32, 1e8 + 1 is 1e8: only this order leaves the 1.
    one = torch.zeros(1)
    for value in (1e8, -1e8, 1.0):
        one += value
    assert scores[0].tolist() == [0.0, one.item(), 1e8, 5.0] and one.item() == 1.0


def test_edits_asked_out_of_lever_order_are_made_in_it() -> None:
    # The levers that read no scores ask ahead of the step (Steering.prepare), the others in
    # it: each row's edits are still made in the order of its levers (their positions).
    scores = torch.zeros(2, 4)
    scores[1, 3] = NEG
    ahead = StepEdits()
    ahead.position = 1
    ahead.add([1], -1e8)
    ahead.row = 1
    ahead.position = 0
    ahead.remove([1])
    edits = StepEdits(allowed={1: 3})
    edits.position = 2
    edits.add([1], 1.0)
    edits.position = 0
    edits.add([1], 1e8)
    edits.row = 1
    edits.position = 1
    edits.remove([0, 2])  # after the removal of 1, it would empty the row: not made
    edits.take(ahead)
    edits.apply(scores)
    # In float32, 1e8 + 1 is 1e8: only the levers' order (1e8, -1e8, 1) leaves the 1.
    assert scores[0].tolist() == [0.0, 1.0, 0.0, 0.0]
    assert torch.isfinite(scores[1]).tolist() == [True, False, True, False]


def test_a_failed_rows_edits_are_forgotten() -> None:
    scores = torch.zeros(2, 4)
    edits = StepEdits()
    edits.row = 0
    edits.add([0], 1.0)
    edits.row = 1
    edits.add([1], 1.0)
    edits.remove([2])
    edits.remove_rows([0, 1], [3])
    edits.forget(1)
    edits.add([3], 2.0)  # forgotten too: the row failed
    edits.apply(scores)
    assert scores.tolist() == [[1.0, 0.0, 0.0, NEG], [0.0, 0.0, 0.0, 0.0]]


def test_what_the_model_wanted_is_the_ratio_of_ending_to_allowed_openers() -> None:
    raw = torch.zeros(1, len(VOCAB))
    raw[0, TOKEN["."]] = 2.0
    masked = raw.clone()
    masked[0, TOKEN["["]] = NEG  # " [" stays
    reader = WantedReader(TOKENS.enders, TOKENS.openers, raw.device)
    (wanted,) = reader.after(reader.before(raw, [0]), masked, [0]).values()
    p = torch.softmax(raw[0], -1)
    expected = float(p[TOKENS.enders].sum() / p[TOKEN[" ["]])
    assert wanted.end_over_open == pytest.approx(expected, rel=1e-6)
    assert wanted.may_open and wanted.may_end
    masked[0, TOKENS.openers] = NEG
    (closed,) = reader.after(reader.before(raw, [0]), masked, [0]).values()
    assert not closed.may_open


@pytest.mark.filterwarnings("ignore:The bitmask covers only")  # the padded case, on purpose
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize(("width", "columns"), [(64, 64), (70, 70), (49152, 49152), (64, 80)])
@pytest.mark.parametrize("ahead", [False, True])
def test_the_cpu_bitmask_equals_xgrammars_kernel(
    width: int, columns: int, dtype: torch.dtype, ahead: bool
) -> None:
    # columns > width: logits wider than the bitmask (a padded vocabulary), the rest untouched.
    generator = torch.Generator().manual_seed(width)
    bitmask = torch.randint(-2**31, 2**31 - 1, (6, (width + 31) // 32), dtype=torch.int32,
                            generator=generator)
    bitmask[2] = -1  # a row that keeps everything
    bitmask[4] = -1  # one that forbids two tokens: 1 and the last
    bitmask[4, 0] = ~2
    bitmask.numpy()[4, -1] &= ~np.array(1 << ((width - 1) % 32), np.uint32).view(np.int32)
    bitmask[5] = ~0x01010101  # and one that forbids every eighth token
    bitmask[3] = 0
    bitmask[3, 0] = 5  # and one that keeps three tokens: 0, 2 and the last
    bitmask.numpy()[3, -1] = np.array(1 << ((width - 1) % 32), np.uint32).view(np.int32)
    scores = torch.randn(6, columns, generator=generator).to(dtype)
    scores[0, 1] = NEG  # already masked
    # Every kind of row, alone and mixed: none forbidden (2) and very few (4), through numpy
    # where planned ahead; few forbidden (5, xgrammar's kernel); few kept (3); in between (0, 1).
    for indices in ([0, 1, 2, 3, 4, 5], [1, 3], [2], [3], [4], [5], [0, 2, 3], [1, 4, 5]):
        ours, theirs = scores.clone(), scores.clone()
        if ahead:  # planned before the logits: the rows forbidding very few ids list them
            counts = MaskPlan(bitmask, indices, columns, dtype=dtype, ahead=True).apply(ours)
        else:
            counts = apply_bitmask(ours, bitmask, indices)
        kept = np.unpackbits(bitmask.numpy().view(np.uint8), axis=-1, bitorder="little")
        if dtype is torch.float64:  # xgrammar's kernel takes no float64
            keep = torch.from_numpy(kept[indices, :width]).bool()
            theirs[indices, :width] = torch.where(keep, theirs[indices, :width], NEG)
        else:
            xgr.apply_token_bitmask_inplace(theirs, bitmask, indices=indices)
        assert torch.equal(ours, theirs)
        assert counts == {i: int(kept[i, :width].sum()) for i in indices}


def test_ids_may_be_a_list_a_tensor_or_an_array() -> None:
    scores = torch.zeros(1, 5)
    edits = StepEdits()
    edits.remove([0])
    edits.remove(torch.tensor([1]))
    edits.remove(np.array([2]))
    edits.add([], 3.0)  # nothing to do
    edits.apply(scores)
    assert scores[0].tolist() == [NEG, NEG, NEG, 0.0, 0.0]


def test_the_reader_gives_the_chainers_share_of_all_probability_and_over_the_openers() -> None:
    raw = torch.zeros(1, len(VOCAB))
    raw[0, TOKEN[","]] = math.log(6.0)  # e^0 for each other token
    masked = raw.clone()
    masked[0, TOKEN["["]] = NEG  # one of the two openers masked
    reader = WantedReader(TOKENS.enders, TOKENS.openers, raw.device, chainers=TOKENS.chainers)
    wanted = reader.after(reader.before(raw, [0]), masked, [0])[0]
    assert wanted.chain_share == pytest.approx(6 / (6 + len(VOCAB) - 1))
    assert wanted.chain_over_open == pytest.approx(6.0)
    plain = WantedReader(TOKENS.enders, TOKENS.openers, raw.device)
    assert plain.after(plain.before(raw, [0]), masked, [0])[0].chain_share == 0.0


def test_a_row_whose_chainers_cannot_reach_half_is_settled_without_its_normalizer() -> None:
    raw = torch.zeros(3, len(VOCAB))
    raw[0, TOKEN[","]] = math.log(6.0)  # the top score: its share is read exactly
    raw[1, TOKEN[" the"]] = 10.0        # "," is 10 below the top: under a half for sure
    raw[2, TOKEN[","]] = 10.0           # nearly all the probability
    reader = WantedReader(TOKENS.enders, TOKENS.openers, raw.device, chainers=TOKENS.chainers)
    for rows in ([0, 1, 2], [2, 1]):  # every row in order, or a gather of some
        wanted = reader.after(reader.before(raw, rows), raw.clone(), rows)
        if 0 in wanted:
            assert wanted[0].chain_share == pytest.approx(6 / (6 + len(VOCAB) - 1))
        assert wanted[1].chain_share == 0.0
        assert wanted[1].chain_over_open == pytest.approx(0.5)  # its ratio is still read
        others = len(VOCAB) - 1  # e^0 each
        assert wanted[2].chain_share == pytest.approx(math.exp(10) / (math.exp(10) + others))


def test_a_row_whose_levers_will_not_read_the_share_is_not_asked_its_normalizer() -> None:
    raw = torch.zeros(3, len(VOCAB))
    raw[:, TOKEN[","]] = 10.0  # every row could chain: one max settles none of them
    raw[1, TOKEN[" the"]] = 20.0  # but this one
    asked: list[int] = []

    def shares(row: int) -> bool:
        asked.append(row)
        return row != 2

    reader = WantedReader(TOKENS.enders, TOKENS.openers, raw.device, chainers=TOKENS.chainers)
    wanted = reader.after(reader.before(raw, [0, 1, 2], shares=shares), raw.clone(), [0, 1, 2])
    assert asked == [0, 2]  # row 1 settled by its max, without asking
    assert wanted[0].chain_share == pytest.approx(math.exp(10) / (math.exp(10) + len(VOCAB) - 1))
    assert wanted[1].chain_share == wanted[2].chain_share == 0.0
    assert wanted[2].chain_over_open == wanted[0].chain_over_open  # its ratio is still read


def test_a_few_rows_chainers_far_below_their_best_score_read_are_settled_before_asking() -> None:
    # Weighed in plain floats, a row whose chainers fall below half of its best score read
    # cannot give them half the probability: its levers are not asked (``may_share``). The
    # arrays' path (torch's) asks every row's levers first, before any reduction.
    raw = torch.zeros(2, len(VOCAB))
    raw[0, TOKEN["."]] = 10.0  # an ender leads: "," is 10 below it
    raw[1, TOKEN[","]] = 10.0  # "," leads: its levers are asked, its normalizer read
    asked: list[int] = []

    def may_share(row: int) -> bool:
        asked.append(row)
        return True

    reader = WantedReader(TOKENS.enders, TOKENS.openers, raw.device, chainers=TOKENS.chainers)
    read = reader.read(raw, [0, 1], reader.allowed(None, [0, 1]), may_share=may_share)
    assert asked == ([1] if wanted_module.host_view(raw) is not None else [0, 1])
    assert read[0].chain_share == 0.0
    others = len(VOCAB) - 1  # e^0 each
    assert read[1].chain_share == pytest.approx(math.exp(10) / (math.exp(10) + others))


class _Raises(Lever):
    def edit(self, state: AnswerState, edits: StepEdits) -> None:
        if len(state.tokens) >= 4:
            raise RuntimeError("a lever failed on purpose")


def test_a_row_whose_lever_fails_loses_its_edits_and_the_others_keep_theirs() -> None:
    # Enough rows for the batched classes; levers given after the row was made count too.
    answers = [("Paris", " is"), ("Paris", " is", " 18"), ("Paris", " ["), *ANSWERS]
    raw, masked = masked_scores(len(answers))
    rows = list(range(len(answers)))
    reader = WantedReader(TOKENS.enders, TOKENS.openers, raw.device, chainers=TOKENS.chainers)
    steered = []
    for answer in answers:
        row = RowSteering(TOKENS)
        row.levers = [*every_lever(), _Raises()]
        row.state = state_of(answer)
        steered.append(row)
    edits = StepEdits(reader.after(reader.before(raw, rows), masked, rows))
    failed: list[int] = []
    _edit_all(edits, list(enumerate(steered)),
              on_error=lambda row, error: failed.append(row))
    out = masked.clone()
    edits.apply(out)
    assert failed == [row for row, answer in enumerate(answers) if len(answer) >= 4]
    assert 0 < len(failed) < len(answers)
    for row, answer in enumerate(answers):
        alone = masked[row : row + 1].clone()
        if row not in failed:
            state = state_of(answer)
            for lever in every_lever():
                lever.apply(state, alone, raw[row : row + 1])
        assert out[row].tolist() == alone[0].tolist(), (row, answer)


def bitmask_of(allowed: np.ndarray) -> np.ndarray:
    """xgrammar's packed bitmask (int32 words) of rows of 0/1 flags."""
    width = -(-allowed.shape[1] // 32) * 32
    padded = np.zeros((allowed.shape[0], width), dtype=np.uint8)
    padded[:, : allowed.shape[1]] = allowed
    return np.packbits(padded, axis=-1, bitorder="little").view(np.int32)


@pytest.mark.parametrize("rows", [[0], [2, 0], [0, 1, 2, 3, 4, 5]])
@pytest.mark.parametrize("chained", [True, False])
def test_reading_once_before_the_masks_equals_reading_around_them(
    rows: list[int], chained: bool
) -> None:
    # ``read`` takes what the masks allow from the bitmask, before the logits; ``before`` and
    # ``after`` read the scores around the masks. A few host rows are weighed in plain floats,
    # more in arrays: either way the same ``Wanted``, NaN and infinite scores included.
    generator = torch.Generator().manual_seed(len(rows))
    raw = torch.randn(6, len(VOCAB), generator=generator) * 3
    raw[0, TOKEN[","]] = 6.0  # a row whose chainers lead: its normalizer is read
    raw[1, TOKENS.enders] = NEG  # the model gives no ending any chance
    raw[3, TOKEN["!"]] = float("inf")
    raw[4, TOKEN[" the"]] = float("nan")  # not read: the arrays' path is not needed
    raw[5, TOKEN["["]] = float("nan")
    allowed = (torch.rand(6, len(VOCAB), generator=generator) > 0.3).numpy()
    allowed[2, TOKENS.openers] = False  # no opener allowed
    allowed[1, TOKENS.enders] = False
    masked = torch.where(torch.from_numpy(allowed), raw, NEG)
    reader = WantedReader(TOKENS.enders, TOKENS.openers, raw.device,
                          chainers=TOKENS.chainers if chained else None)
    flags = reader.allowed(bitmask_of(allowed), rows)
    assert flags.tolist() == allowed[rows][:, reader.ids].tolist()
    read = reader.read(raw, rows, flags)
    around = reader.after(reader.before(raw, rows), masked, rows)
    assert list(read) == rows
    for row in rows:
        ours, theirs = read[row], around[row]
        assert (ours.may_open, ours.may_end) == (theirs.may_open, theirs.may_end), row
        for field in ("end_over_open", "chain_over_open", "chain_share"):
            assert getattr(ours, field) == pytest.approx(
                getattr(theirs, field), rel=1e-6, nan_ok=True
            ), (row, field)
    assert reader.allowed(None, rows).all()  # no bitmask: every id allowed


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_removals_known_ahead_join_the_masks_write_and_the_counts_stay_exact(
    dtype: torch.dtype,
) -> None:
    width = 64
    allowed = np.ones((3, width), dtype=np.uint8)
    allowed[:, [5, 9]] = 0  # two of 64 forbidden: listed ahead
    allowed[2, 10:] = 0     # keeps ten: not listed
    bitmask = torch.from_numpy(bitmask_of(allowed))
    plan = MaskPlan(bitmask, [0, 1, 2], width, ahead=True)
    assert plan.listed == [0, 1]
    taken = plan.forbid({
        0: np.array([5, 7, 7, 8]),     # 5 already forbidden, 7 asked twice
        1: np.arange(width),           # would leave no token: the edits keep one
        2: np.array([1]),              # not listed
    })
    assert taken == [0]
    scores = torch.randn(3, width, dtype=dtype)
    expected = torch.where(torch.from_numpy(allowed.astype(bool)), scores, NEG)
    expected[0, [7, 8]] = NEG
    # Made for float32: float64 logits plan it again in the step, the removals still made.
    counts = plan.apply(scores)
    assert torch.equal(scores, expected)
    assert counts == {0: 60, 1: 62, 2: 8}


def test_a_rows_removals_are_taken_out_of_the_edits_but_a_forgotten_rows_are_not() -> None:
    edits = StepEdits()
    edits.remove([1, 2])
    edits.remove_rows([0, 1], [3])  # many rows in one entry: left in the edits
    edits.position = 1
    edits.remove([4])
    edits.row = 1
    edits.remove([5])
    edits.row = 2
    edits.remove([6])
    edits.forget(2)
    found = edits.removals_of([0, 2])
    assert {row: ids.tolist() for row, ids in found.items()} == {0: [1, 2, 4]}
    edits.drop_removals(list(found))
    scores = torch.zeros(3, 8)
    edits.apply(scores)
    assert torch.isinf(scores).nonzero().tolist() == [[0, 3], [1, 3], [1, 5]]


def test_host_view_gives_the_memory_of_host_floats_only() -> None:
    scores = torch.zeros(2, 3)
    view = host_view(scores)  # the function itself, whatever path the fixture took
    assert view is not None
    view[0, 1] = 5.0
    assert scores[0, 1] == 5.0  # the same memory
    tracked = torch.zeros(2, 3, requires_grad=True)
    assert host_view(tracked) is not None
    assert host_view(torch.zeros(2, 3, dtype=torch.float64)) is not None
    for dtype in (torch.float16, torch.bfloat16):
        assert host_view(torch.zeros(2, 3, dtype=dtype)) is None
