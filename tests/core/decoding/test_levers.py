"""The levers on a scripted vocabulary: which logits move, and by how much."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from citeformer import InvalidInputError, build_request
from citeformer.decoding.levers import (
    AnswerState,
    CiteAfterWord,
    CiteClosed,
    ClaimWords,
    ClauseEnd,
    CodeCopy,
    EndBias,
    EndIntent,
    Lever,
    NumberCopy,
    PeriodAfterMarker,
    PunctuationRun,
    RepeatBlock,
    WordRepeatBlock,
    WrapUp,
    levers_for,
)
from citeformer.decoding.vocab import Vocabulary
from citeformer.evidence import LexicalEvidence, Support
from citeformer.readability import OFF, Readability
from citeformer.types import Policy, Source

VOCAB = [
    b"<eos>", b"Paris", b" is", b" [", b"[", b"1", b"]", b".", b".\n", b",", b" in", b"8",
    b"9", b" 18", b"7", b"!", b" the", b" ",
]
TOKEN = {raw.decode(): index for index, raw in enumerate(VOCAB)}
TOKENS = Vocabulary(VOCAB)
NEG = float("-inf")


def logits(**values: float) -> torch.FloatTensor:
    scores = torch.zeros(1, len(VOCAB))
    for text, value in values.items():
        scores[0, TOKEN[text.replace("_", " ")]] = value
    return scores


def test_token_classes() -> None:
    assert sorted(TOKENS.enders.tolist()) == [TOKEN["."], TOKEN[".\n"], TOKEN["!"]]
    assert sorted(TOKENS.openers.tolist()) == [TOKEN[" ["], TOKEN["["]]
    assert TOKEN[" 18"] in TOKENS.digit_ids.tolist()
    assert TOKEN["1"] in TOKENS.exempt and TOKEN["<eos>"] not in TOKENS.exempt


def state_of(answer: tuple[str, ...], vocab: Vocabulary = TOKENS) -> AnswerState:
    state = AnswerState(vocab.token_bytes)
    for text in answer:
        state.append(vocab.token_bytes.index(text.encode()))
    return state


def feed(
    lever: Lever, answer: tuple[str, ...], scores: torch.Tensor, raw: torch.Tensor | None = None
) -> list[float]:
    """The lever's logits after ``answer`` (the prompt is never part of the answer)."""
    out = scores.clone()
    lever.apply(state_of(answer), out, raw)
    return out[0].tolist()  # type: ignore[no-any-return]


def test_the_answer_state_decodes_once_per_step() -> None:
    state = state_of(("Paris", " is"))
    assert state.text == "Paris is" and state.tokens == [TOKEN["Paris"], TOKEN[" is"]]
    state.append(TOKEN[" ["])
    assert state.text == "Paris is [" and state.data == bytearray(b"Paris is [")


def test_a_wanted_sentence_end_becomes_a_marker_where_ending_is_masked() -> None:
    lever = EndIntent(TOKENS)
    assert lever.needs_raw
    model = logits(**{".": 5.0, ",": 4.0, "_[": 1.0})
    masked = model.clone()
    masked[0, TOKENS.enders] = NEG  # the grammar: no terminator before a cite-group
    out = feed(lever, (), masked, raw=model.clone())
    assert max(range(len(out)), key=out.__getitem__) == TOKEN[" ["]
    # After the mask, the openers carry their own probability plus what ending had.
    probs = torch.softmax(model[0], dim=-1)
    wanted = probs[TOKENS.enders].sum() + probs[TOKENS.openers].sum()
    shown = torch.softmax(torch.tensor(out), dim=-1)[TOKENS.openers].sum()
    assert math.isclose(shown.item(), wanted.item(), rel_tol=1e-4)


def test_nothing_moves_where_ending_is_allowed_without_support() -> None:
    model = logits(**{".": 5.0, "_[": 1.0})
    assert feed(EndIntent(TOKENS), (), model, raw=model.clone()) == model[0].tolist()


def test_nothing_moves_without_the_models_own_scores() -> None:
    masked = logits(**{".": 5.0, "_[": 1.0})
    masked[0, TOKENS.enders] = NEG
    assert feed(EndIntent(TOKENS), (), masked, raw=None) == masked[0].tolist()


@pytest.mark.parametrize(("answer", "moves"), [((" is", " 18"), True), ((" [", "1", "]"), False)])
def test_required_ending_counts_as_masked_unless_a_group_was_just_closed(
    answer: tuple[str, ...], moves: bool
) -> None:
    # Under REQUIRED a "." left open after " 18" can only continue a dotted term ("18.5"): the
    # model's wish to end still goes to the openers, and the "." keeps its own share.
    lever = EndIntent(TOKENS, required=True)
    model = logits(**{".": 5.0, "_[": 1.0})
    allowed = model.clone()
    allowed[0, TOKEN[".\n"]] = NEG  # only the bare "." is left by the grammar
    out = feed(lever, answer, allowed, raw=model.clone())
    assert (out[TOKEN[" ["]] > 1.0) is moves
    assert out[TOKEN["."]] == 5.0


def test_nothing_moves_where_no_marker_may_open() -> None:
    model = logits(**{".": 5.0})
    masked = model.clone()
    masked[0, TOKENS.enders] = NEG
    masked[0, TOKENS.openers] = NEG
    assert feed(EndIntent(TOKENS), (), masked, raw=model.clone()) == masked[0].tolist()


class FixedSupport(Support):
    def __init__(self, score: float) -> None:
        self.score = score
        self.claims: list[str] = []

    def scores(self, claim: str) -> list[float]:
        self.claims.append(claim)
        return [self.score, 0.0]


@pytest.mark.parametrize(("support", "moves"), [(0.9, True), (0.3, False)])
def test_auto_cites_a_well_supported_sentence(support: float, moves: bool) -> None:
    scorer = FixedSupport(support)
    lever = EndIntent(TOKENS, support=scorer, threshold=0.5)
    model = logits(**{".": 5.0, "_[": 1.0})
    out = feed(lever, (" is", " the", " is", " the"), model, raw=model.clone())
    assert (out[TOKEN[" ["]] > 1.0) is moves
    assert scorer.claims and scorer.claims[-1] == "is the is the"


def test_repeat_block_blocks_an_answer_ngram_only() -> None:
    processor = RepeatBlock(3, TOKENS.exempt)
    out = feed(processor, (" is", " the", " in", " is", " the"), logits())
    assert out[TOKEN[" in"]] == NEG  # " is the" was followed by " in" before
    assert sum(v == NEG for v in out) == 1


def test_repeat_block_spares_markers_and_keeps_one_token() -> None:
    processor = RepeatBlock(2, TOKENS.exempt)
    out = feed(processor, (" [", "1", " ["), logits())
    assert out[TOKEN["1"]] == 0.0
    only = RepeatBlock(2, TOKENS.exempt)
    scores = torch.full((1, len(VOCAB)), NEG)
    scores[0, TOKEN[" the"]] = 1.0
    out = feed(only, (" is", " the", " is"), scores)
    assert out[TOKEN[" the"]] == 1.0  # the only token left is kept


MARKUP = [b"<eos>", b"The", b" assert", b" *", b"*", b"**", b"****", b"...", b".", b" ", b"-"]
MARKUP_TOKENS = Vocabulary(MARKUP)


def punctuation_blocked(answer: tuple[str, ...], limit: int = 3) -> set[str]:
    out = torch.zeros(1, len(MARKUP))
    PunctuationRun(MARKUP_TOKENS, limit).apply(state_of(answer, MARKUP_TOKENS), out, None)
    return {MARKUP[i].decode() for i, v in enumerate(out[0].tolist()) if v == NEG}


def test_punctuation_run_blocks_a_run_past_its_limit_only() -> None:
    assert punctuation_blocked(("The",)) == {"****"}  # too long wherever it goes
    assert punctuation_blocked(("The", " *")) == {"****"}  # " *" + "**" is "***", fine
    assert punctuation_blocked(("The", " *", "*")) == {"****", "**"}  # "**" would make four
    assert punctuation_blocked(("The", " *", "**")) == {"****", "**", "*"}
    assert punctuation_blocked(("The", " *", "*", " ")) == {"****"}  # a space ends the run
    assert punctuation_blocked(("The", "-")) == {"****"}  # another character is another run
    assert punctuation_blocked(("The", "...")) == {"****", ".", "..."}  # "..." is, "...." not
    assert punctuation_blocked(("The",), limit=4) == set()  # "****" is four, not more
    assert punctuation_blocked(("The", " *"), limit=4) == {"****"}  # " *" + "****" is five


def test_punctuation_run_keeps_one_token_and_turns_off() -> None:
    scores = torch.full((1, len(MARKUP)), NEG)
    scores[0, MARKUP.index(b"****")] = 1.0
    PunctuationRun(MARKUP_TOKENS, 3).apply(state_of(("The",), MARKUP_TOKENS), scores, None)
    assert scores[0, MARKUP.index(b"****")] == 1.0  # the only token left is kept
    request = build_request("q", ["s"], readability=Readability(max_punctuation_run=0))
    assert not any(isinstance(lever, PunctuationRun)
                   for lever in levers_for(request, MARKUP_TOKENS, [0], None))
    default = build_request("q", ["s"])
    assert any(isinstance(lever, PunctuationRun)
               for lever in levers_for(default, MARKUP_TOKENS, [0], None))


WORDS = [
    b"<eos>", b"It", b" It", b" it", b" is", b" the", b" The", b" default", b" encod", b"ing",
    b" for", b" strings", b" str", b"ings", b"s", b" [", b"1", b"]", b".", b" ", b" bytes",
    b" (the", b"ings.",
]
WORD = {raw.decode(): index for index, raw in enumerate(WORDS)}
WORD_TOKENS = Vocabulary(WORDS)


def word_feed(n: int, answer: tuple[str, ...], scores: torch.Tensor | None = None) -> list[float]:
    """The word repeat block after ``answer`` (prompt: one token, never counted)."""
    lever = WordRepeatBlock(n, WORD_TOKENS, [WORD["<eos>"]])
    out = torch.zeros(1, len(WORDS)) if scores is None else scores.clone()
    lever.apply(state_of(answer, WORD_TOKENS), out, None)
    return out[0].tolist()  # type: ignore[no-any-return]


FIRST = (" The", " default", " encod", "ing", " for", " strings", " [", "1", "]", ".")


def blocked_after(answer: tuple[str, ...], n: int = 5) -> set[str]:
    return {WORDS[i].decode() for i, v in enumerate(word_feed(n, answer)) if v == NEG}


def test_word_repeat_block_stops_a_phrase_said_before() -> None:
    # Markers are no words, case is folded, the split into tokens does not matter.
    again = (" It", " is", " the", " default", " encod", "ing", " for")
    assert blocked_after(FIRST + again) == {" strings", " str"}
    assert blocked_after(FIRST + again, n=6) == set()  # "is" came before "the" this time


def test_word_repeat_block_inside_a_word() -> None:
    again = (" It", " is", " the", " default", " encod", "ing", " for", " str")
    # "ings" and "ings." finish "strings", "ing" may go on to it; "s" makes "strs".
    assert blocked_after(FIRST + again) == {"ing", "ings", "ings."}


def test_word_repeat_block_once_the_word_is_written() -> None:
    again = (" It", " is", " the", " default", " encod", "ing", " for", " strings")
    blocked = blocked_after(FIRST + again)
    # Whatever closes "strings" completes the phrase; ending the answer, a marker or a longer
    # word does not count.
    assert {".", " is", " ", " bytes"} <= blocked
    assert not blocked & {" [", "s", "ings", "1", "]", "<eos>"}


def test_word_repeat_block_leaves_new_phrases_and_the_prompt_alone() -> None:
    assert blocked_after((" the", " default", " encod", "ing", " for")) == set()
    # " (the" begins a new word after punctuation: checked like " the".
    assert blocked_after((" the", " is", " the", " is")) == set()
    assert blocked_after((" the", " is", " the", " is"), n=3) == {" the", " The", " (the"}


def test_word_repeat_block_keeps_one_token() -> None:
    scores = torch.full((1, len(WORDS)), NEG)
    scores[0, WORD[" strings"]] = 1.0
    again = (" It", " is", " the", " default", " encod", "ing", " for")
    out = word_feed(5, FIRST + again, scores)
    assert out[WORD[" strings"]] == 1.0


@pytest.mark.parametrize(
    ("answer", "blocked"),
    [((" is", ","), True), ((" is", ",", " "), True), ((" is",), False), ((" the",), False)],
)
def test_no_marker_right_after_a_comma(answer: tuple[str, ...], blocked: bool) -> None:
    out = feed(CiteAfterWord(TOKENS), answer, logits())
    assert (out[TOKEN[" ["]] == NEG) is blocked
    assert (out[TOKEN["["]] == NEG) is blocked


def test_no_marker_after_a_comma_unless_nothing_else_is_left() -> None:
    scores = torch.full((1, len(VOCAB)), NEG)
    scores[0, TOKEN[" ["]] = 1.0  # the sentence bound: the grammar allows only a marker
    out = feed(CiteAfterWord(TOKENS), (" is", ","), scores)
    assert out[TOKEN[" ["]] == 1.0


SPANS = [b"<eos>", b" is", b" (", b"(", b")", b' "', b'"', b"`", " \u201c".encode(),
         "\u201d".encode(), b" [", b"[", b"1", b"]", b".", b" x"]
SPAN_VOCAB = Vocabulary(SPANS)


def span_state(answer: tuple[str, ...]) -> AnswerState:
    """The answer written so far, one token of ``SPANS`` per text."""
    state = AnswerState(SPAN_VOCAB.token_bytes)
    for text in answer:
        state.append(SPANS.index(text.encode()))
    return state


@pytest.mark.parametrize(
    ("answer", "blocked"),
    [
        ((" is", " (", " x"), True),                 # ... (x [1].
        ((" is", " (", " x", ")"), False),           # ... (x) [1].
        ((" is", ' "', " x"), True),                 # ... "x [1].
        ((" is", ' "', " x", '"'), False),
        ((" is", "`", " x"), True),
        ((" is", "`", " x", "`"), False),
        ((" is", " \u201c", " x"), True),
        ((" is", " \u201c", " x", "\u201d"), False),
        ((" is", " (", " x", " [", "1", "]", ".", " x"), False),  # opened in an earlier claim
        ((" is",), False),
    ],
)
def test_no_marker_inside_a_span_the_claim_left_open(
    answer: tuple[str, ...], blocked: bool
) -> None:
    state = span_state(answer)
    out = torch.zeros(1, len(SPANS))
    CiteClosed(SPAN_VOCAB).apply(state, out)
    assert bool(out[0, SPANS.index(b" [")] == NEG) is blocked
    assert bool(out[0, SPANS.index(b"[")] == NEG) is blocked
    assert out[0, SPANS.index(b")")] == 0.0  # closing it is what is left


def test_a_marker_still_opens_inside_an_open_span_at_the_sentence_bound() -> None:
    state = span_state((" is", " (", " x"))
    out = torch.full((1, len(SPANS)), NEG)
    out[0, SPANS.index(b" [")] = 1.0  # the grammar allows only a marker
    CiteClosed(SPAN_VOCAB).apply(state, out)
    assert out[0, SPANS.index(b" [")] == 1.0


@pytest.mark.parametrize(
    ("answer", "blocked"),
    [
        ((), True),                                          # [1] as the whole sentence
        ((" x",), True),                                     # x [1].
        ((" x", " is"), True),                               # x is [1].
        ((" x", " is", " x"), False),                        # x is x [1].
        ((" x", " is", " x", " [", "1", "]"), False),        # x is x [1][2]: stacked
        ((" x", " is", " x", " [", "1", "]", ".", " x"), True),  # the next sentence counts anew
        ((" x", " is", " x", ".", " x", " is"), True),      # and so does an uncited one's
        ((" x", " is", " (", " x", ")"), False),             # x is (x) [1].: punctuation is no word
    ],
)
def test_no_marker_before_the_claim_holds_three_words(
    answer: tuple[str, ...], blocked: bool
) -> None:
    state = span_state(answer)
    out = torch.zeros(1, len(SPANS))
    ClaimWords(SPAN_VOCAB, 3).apply(state, out)
    assert bool(out[0, SPANS.index(b" [")] == NEG) is blocked
    assert bool(out[0, SPANS.index(b"[")] == NEG) is blocked
    assert out[0, SPANS.index(b" x")] == 0.0  # writing on is what is left


def test_a_marker_still_opens_after_a_short_claim_when_nothing_else_is_allowed() -> None:
    state = span_state((" x",))
    out = torch.full((1, len(SPANS)), NEG)
    out[0, SPANS.index(b" [")] = 1.0  # the grammar allows only a marker
    ClaimWords(SPAN_VOCAB, 3).apply(state, out)
    assert out[0, SPANS.index(b" [")] == 1.0


CLAUSES = [b"<eos>", b"Paris", b"If", b" is", b" the", b" capital", b" of", b" France", b",",
           b", but", b" [", b"[", b"1", b"]", b".", b";"]
CLAUSE_VOCAB = Vocabulary(CLAUSES)
CLAIM = ("Paris", " is", " the", " capital", " of", " France")
CHAINERS = (b",", b", but", b";")


def clause_end(
    answer: tuple[str, ...], *, question: str = "Where is Paris?",
    source: str = "Paris is the capital of France.", comma: float = 4.0,
) -> list[float]:
    """``ClauseEnd``'s logits after ``answer`` where the model gives each token that begins with
    ``,`` or ``;`` the score ``comma``."""
    state = AnswerState(CLAUSE_VOCAB.token_bytes)
    for text in answer:
        state.append(CLAUSES.index(text.encode()))
    raw = torch.zeros(1, len(CLAUSES))
    for chainer in CHAINERS:
        raw[0, CLAUSES.index(chainer)] = comma
    out = raw.clone()
    support = LexicalEvidence().bind(question, [Source(source)])
    ClauseEnd(CLAUSE_VOCAB, support, question, threshold=0.9).apply(state, out, raw)
    return out[0].tolist()  # type: ignore[no-any-return]


def test_a_clause_chained_on_a_supported_claim_is_cited_instead() -> None:
    out = clause_end(CLAIM)
    for chainer in CHAINERS:
        assert out[CLAUSES.index(chainer)] == NEG
    # The openers (two, e^0 each) carry their own probability and the chainers' (three, e^4).
    p_chain_over_open = 3 * math.exp(4.0) / 2
    assert out[CLAUSES.index(b" [")] == pytest.approx(math.log1p(p_chain_over_open), rel=1e-5)
    assert out[CLAUSES.index(b" of")] == 0.0


@pytest.mark.parametrize(
    ("answer", "options"),
    [
        (CLAIM, {"question": "Is Paris the capital of France?"}),  # says nothing new
        (CLAIM, {"source": "Rome is the capital of Italy."}),      # no source supports it
        (CLAIM, {"comma": -4.0}),                                  # the model wants no comma
        (CLAIM, {"comma": 1.0}),  # above the openers but under half the probability: not "wants"
        (CLAIM[:4], {}),                                           # four words: not yet a claim
        (("If", *CLAIM[1:]), {}),                         # a dependent clause waits for its main
        ((*CLAIM, " [", "1", "]"), {}),                            # cited already
    ],
)
def test_a_clause_is_left_alone_where_the_claim_is_no_supported_answer_yet(
    answer: tuple[str, ...], options: dict[str, Any]
) -> None:
    comma = options.get("comma", 4.0)
    untouched = [comma if raw in CHAINERS else 0.0 for raw in CLAUSES]
    assert clause_end(answer, **options) == untouched


NAMES = [b"<eos>", b" is", b" `", b"`", b"text", b"wrap", b".", b"wr", b"_whitesp", b" expand",
         b"tabs", b" foo", b" x", b"."]
NAME_VOCAB = Vocabulary(NAMES)
NAME_SOURCES = ["Tabs are expanded with expandtabs() by textwrap.wrap by default."]


def code_feed(answer: tuple[bytes, ...]) -> list[float]:
    state = AnswerState(NAME_VOCAB.token_bytes)
    for raw in answer:
        state.append(NAMES.index(raw))
    out = torch.zeros(1, len(NAMES))
    CodeCopy(NAME_VOCAB, NAME_SOURCES, 8.0).apply(state, out)
    return out[0].tolist()  # type: ignore[no-any-return]


def test_code_copy_penalises_a_name_no_source_holds_inside_backticks() -> None:
    inside = code_feed((b" is", b" `", b"text", b"wrap", b"."))  # `textwrap.
    assert inside[NAMES.index(b"wrap")] == 0.0  # textwrap.wrap is in the source
    assert inside[NAMES.index(b"wr")] == 0.0  # on its way there
    assert inside[NAMES.index(b"_whitesp")] == -8.0  # textwrap._whitesp is in none
    assert inside[NAMES.index(b" expand")] == 0.0  # a new name: expandtabs begins so
    assert inside[NAMES.index(b" foo")] == -8.0
    assert inside[NAMES.index(b" is")] == -8.0 and inside[NAMES.index(b"<eos>")] == 0.0
    after_dot = code_feed((b" `", b"wrap"))  # `wrap: the part after a dot counts as a name
    assert after_dot[NAMES.index(b"_whitesp")] == -8.0


def test_code_copy_leaves_prose_and_closed_spans_alone() -> None:
    assert set(code_feed((b" is", b" foo"))) == {0.0}  # no backtick: prose
    assert set(code_feed((b" `", b"wrap", b"`", b" is"))) == {0.0}  # the span is closed


def test_number_copy_penalises_invented_digits() -> None:
    processor = NumberCopy(TOKENS, ["It was completed in 1889."], 8.0)
    out = feed(processor, (" in", " 18", "8"), logits())
    assert out[TOKEN["9"]] == 0.0  # 1889
    assert out[TOKEN["7"]] == -8.0  # 1887 is in no source
    assert out[TOKEN["8"]] == -8.0  # 1888 neither


def test_number_copy_leaves_marker_digits_alone() -> None:
    processor = NumberCopy(TOKENS, ["No numbers here."], 8.0)
    out = feed(processor, (" [",), logits())
    assert out[TOKEN["1"]] == 0.0


@pytest.mark.parametrize(
    ("answer", "raised"),
    [
        ((" is",) * 3, 0.0),  # below the threshold, bound 6 - 2 words
        ((" is",) * 4, 2.0),  # at it
        ((" is",) * 5, 4.0),  # one word further
        ((" is",) * 5 + (",",), 0.0),  # ends in a comma: no place to cite
        ((" is",) * 5 + (" [",), 0.0),  # a marker is open
        ((" is", " [", "1", "]", ".", " is"), 0.0),  # a new sentence starts its count again
    ],
)
def test_wrap_up_raises_openers_near_the_bound(answer: tuple[str, ...], raised: float) -> None:
    out = feed(WrapUp(TOKENS, bound=6, words=2, bias=2.0), answer, logits())
    assert out[TOKEN[" ["]] == out[TOKEN["["]] == raised
    assert out[TOKEN["."]] == 0.0


def test_after_a_marker_a_sentence_ends_with_a_period() -> None:
    out = feed(PeriodAfterMarker(TOKENS), (" is", " [", "1", "]"), logits())
    assert out[TOKEN["!"]] == NEG
    assert out[TOKEN["."]] == out[TOKEN[".\n"]] == out[TOKEN["["]] == 0.0
    # Elsewhere (and when nothing else is left) "!" stays.
    assert feed(PeriodAfterMarker(TOKENS), (" is",), logits())[TOKEN["!"]] == 0.0
    only = torch.full((1, len(VOCAB)), NEG)
    only[0, TOKEN["!"]] = 1.0
    out = feed(PeriodAfterMarker(TOKENS), (" is", " [", "1", "]"), only)
    assert out[TOKEN["!"]] == 1.0


def test_end_bias_grows_with_cited_sentences() -> None:
    processor = EndBias([TOKEN["<eos>"]], 2.0)
    out = feed(processor, (" is", " [", "1", "]", "."), logits())
    assert out[TOKEN["<eos>"]] == 2.0
    mid = EndBias([TOKEN["<eos>"]], 2.0)
    out = feed(mid, (" is", " [", "1"), logits())
    assert out[TOKEN["<eos>"]] == 0.0


@pytest.mark.parametrize(("every_sentence", "raised"), [(False, 2.0), (True, 4.0)])
def test_end_bias_under_auto_counts_every_sentence(every_sentence: bool, raised: float) -> None:
    answer = (" is", ".", " the", " is", " [", "1", "]", ".")  # one plain, one cited sentence
    processor = EndBias([TOKEN["<eos>"]], 2.0, every_sentence=every_sentence)
    assert feed(processor, answer, logits())[TOKEN["<eos>"]] == raised
    uncited = EndBias([TOKEN["<eos>"]], 2.0, every_sentence=every_sentence)
    assert feed(uncited, (" is", "."), logits())[TOKEN["<eos>"]] == (2.0 if every_sentence else 0)


def test_levers_of_a_request_in_the_order_they_act() -> None:
    sources = ["It was completed in 1889."]
    settings = Readability(end_bias=1.0)
    request = build_request("When?", sources, Policy.REQUIRED, readability=settings)
    levers = levers_for(request, TOKENS, [0], LexicalEvidence())
    assert [type(lever).__name__ for lever in levers] == [
        "EndIntent", "CiteAfterWord", "CiteClosed", "ClaimWords", "ClauseEnd", "PeriodAfterMarker",
        "NumberCopy",
        "RepeatBlock",
        "WordRepeatBlock", "PunctuationRun", "WrapUp", "EndBias", "EvidenceBias",
    ]
    assert [type(lever).__name__ for lever in levers_for(request, TOKENS, [0], None)][-1] == (
        "EndBias"
    )
    auto = build_request("When?", sources, Policy.AUTO, readability=settings)
    auto_levers = [type(lever).__name__ for lever in levers_for(auto, TOKENS, [0], None)]
    assert "ClauseEnd" not in auto_levers and "ClaimWords" in auto_levers
    off = build_request("When?", sources, Policy.AUTO, readability=OFF)
    assert levers_for(off, TOKENS, [0], None) == []


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"no_repeat_ngram": 1}, "no_repeat_ngram must be 0"),
        ({"no_repeat_words": True}, "no_repeat_words must be an int from 0 to 1000, got bool True"),
        ({"number_penalty": -1.0}, "number_penalty must be a finite number >= 0"),
        ({"end_bias": float("nan")}, "end_bias must be a finite number"),
        ({"auto_cite_support": 2.0}, "auto_cite_support must be a finite number >= 0 and <= 1"),
        ({"end_intent": 1}, "end_intent must be True or False"),
        ({"cite_after_punctuation": "no"}, "cite_after_punctuation must be True or False"),
        ({"period_after_marker": None}, "period_after_marker must be True or False"),
        ({"wrap_up_words": -1}, "wrap_up_words must be an int from 0 to 1000, got -1"),
        ({"max_punctuation_run": 2.5}, "max_punctuation_run must be an int from 0 to 1000"),
        ({"min_claim_words": "3"}, "min_claim_words must be an int from 0 to 1000, got str .3."),
        ({"clause_support": 1.5}, "clause_support must be a finite number >= 0 and <= 1, got 1.5"),
        ({"clause_support": "0.9"}, "clause_support must be a number, got str .0.9."),
    ],
)
def test_bad_settings_are_named(options: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        Readability(**options)  # type: ignore[arg-type]
