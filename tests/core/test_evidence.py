"""Evidence reweighting: which logits get which bias, on a scripted vocabulary and scores."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest
import torch

from citeformer import Source
from citeformer.evidence import (
    EmbeddingEvidence,
    Evidence,
    LexicalEvidence,
    Support,
    claim_before_marker,
    content_words,
    resolve_evidence,
)
from citeformer.processor import EvidenceLogitsProcessor, IdTokens

VOCAB = [
    b"<eos>", b"Paris", b" is", b" [", b"[", b"1", b"2", b"3", b"]", b"].", b"][",
    b"12", b"1]", b"0", b" in", b" France", b".", b" ", b"1889",
]
TOKEN = {raw.decode(): index for index, raw in enumerate(VOCAB)}
PROMPT = [TOKEN["Paris"]] * 3


class Fixed(Support):
    """Scores given by the test; records the claims it was asked about."""

    def __init__(self, scores: Sequence[float]) -> None:
        self._scores = list(scores)
        self.claims: list[str] = []

    def scores(self, claim: str) -> list[float]:
        self.claims.append(claim)
        return list(self._scores)


def run(generated: Sequence[str], scores: Sequence[float], weight: float = 2.0,
        logits: torch.Tensor | None = None) -> tuple[torch.Tensor, Fixed]:
    """The processor's output at the step after ``generated`` (token texts) was written."""
    support = Fixed(scores)
    processor = EvidenceLogitsProcessor(support, weight, len(scores), IdTokens(VOCAB))
    ids = list(PROMPT)
    processor(torch.tensor([ids]), torch.zeros(1, len(VOCAB)))
    out = torch.zeros(1, len(VOCAB))
    for text in generated:
        ids.append(TOKEN[text])
        step = torch.zeros(1, len(VOCAB)) if logits is None else logits.clone()
        out = processor(torch.tensor([ids]), step)
    return out[0], support


def bias(out: torch.Tensor, token: str) -> float:
    return float(out[TOKEN[token]])


def test_no_change_away_from_a_marker() -> None:
    out, support = run(["Paris", " is", " in", " France"], [0.1, 0.9, 0.2])
    assert torch.equal(out, torch.zeros(len(VOCAB)))
    assert support.claims == []
    out, _ = run(["Paris", " [", "2", "]."], [0.1, 0.9, 0.2])
    assert torch.equal(out, torch.zeros(len(VOCAB)))


def test_open_marker_biases_each_id_token_by_its_source() -> None:
    out, support = run(["Paris", " is", " in", " France", " ["], [0.1, 0.9, 0.3])
    assert support.claims == ["Paris is in France"]
    # weight * (score - lowest score)
    assert bias(out, "1") == pytest.approx(0.0)
    assert bias(out, "2") == pytest.approx(2 * 0.8)
    assert bias(out, "3") == pytest.approx(2 * 0.2)
    for other in ("Paris", " [", "]", "].", "0", " France"):
        assert bias(out, other) == 0.0


def test_multi_digit_ids_take_the_best_id_a_token_can_begin() -> None:
    scores = [0.0] * 12
    scores[0], scores[9], scores[11] = 0.3, 0.5, 0.9  # ids 1, 10, 12
    out, _ = run(["Paris", " ["], scores)
    assert bias(out, "1") == pytest.approx(2 * 0.9)  # "1" begins 1, 10, 11, 12
    assert bias(out, "12") == pytest.approx(2 * 0.9)
    assert bias(out, "1]") == pytest.approx(2 * 0.3)  # ends the id: exactly [1]
    assert bias(out, "2") == 0.0
    out, _ = run(["Paris", " [", "1"], scores)
    assert bias(out, "2") == pytest.approx(2 * 0.9)  # [12
    assert bias(out, "0") == pytest.approx(2 * 0.5)  # [10
    assert bias(out, "]") == pytest.approx(2 * 0.3)  # [1]
    assert bias(out, "].") == pytest.approx(2 * 0.3)
    assert bias(out, "3") == 0.0  # [13 is no id


def test_ids_beyond_the_sources_get_nothing() -> None:
    out, _ = run(["Paris", " ["], [0.0, 1.0])
    assert bias(out, "3") == 0.0
    assert bias(out, "2") == pytest.approx(2.0)


def test_masked_tokens_stay_masked() -> None:
    logits = torch.zeros(1, len(VOCAB))
    logits[0, TOKEN["2"]] = -math.inf  # the grammar forbids [2 here
    out, _ = run(["Paris", " ["], [0.1, 0.9, 0.3], logits=logits)
    assert bias(out, "2") == -math.inf
    assert bias(out, "3") == pytest.approx(2 * 0.2)


def test_second_marker_of_a_group_reuses_the_claim() -> None:
    out, support = run(["Paris", " [", "1", "][",], [0.1, 0.9, 0.3])
    assert support.claims == ["Paris"]
    assert bias(out, "2") == pytest.approx(1.6)


def test_equal_scores_leave_logits_alone() -> None:
    out, _ = run(["Paris", " ["], [0.4, 0.4, 0.4])
    assert torch.equal(out, torch.zeros(len(VOCAB)))


@pytest.mark.parametrize(("text", "claim"), [
    ("Paris is in France [", "Paris is in France"),
    ("Paris is in France [1", "Paris is in France"),
    ("Paris is in France [1][", "Paris is in France"),
    ("Paris [1]. It was built in 1889 [", "It was built in 1889"),
    ("Paris [1] and Berlin [", "and Berlin"),
    ("It is 6.5 km long [", "It is 6.5 km long"),
    ("[", ""),
    ("Paris is in France", None),
    ("Paris [1].", None),
])
def test_claim_before_marker(text: str, claim: str | None) -> None:
    assert claim_before_marker(text) == claim


def test_content_words_drop_stopwords_and_plurals() -> None:
    assert content_words("The towers of Berlin were built in 1889.") == [
        "tower", "berlin", "built", "1889"
    ]


def test_lexical_support_prefers_the_source_with_the_distinguishing_word() -> None:
    sources = [
        Source("The Leaning Tower of Pisa was completed in 1372.", title="Pisa"),
        Source("The Eiffel Tower in Paris was completed in 1889.", title="Eiffel Tower"),
        Source("The Sydney Opera House opened in 1973.", title="Opera House"),
    ]
    support = LexicalEvidence().bind("When was the Eiffel Tower completed?", sources)
    scores = support.scores("The tower was completed in 1889")
    assert max(range(3), key=scores.__getitem__) == 1
    assert scores[2] == 0.0
    # No content word shared with any source: the question decides.
    fallback = support.scores("Yes")
    assert max(range(3), key=fallback.__getitem__) == 1


def test_the_question_counts_beside_the_claim() -> None:
    sources = [
        Source("The else clause of a try statement runs when no exception was raised."),
        Source("The else clause of a for loop runs when the loop ends without break."),
    ]
    question = "When does the else clause of a for loop run?"
    claim = "The else clause runs when no exception was raised"
    alone = LexicalEvidence(question_weight=0).bind(question, sources).scores(claim)
    assert alone[0] > alone[1]  # the claim's own words point to the try statement
    both = LexicalEvidence().bind(question, sources).scores(claim)
    asked = LexicalEvidence(question_weight=0).bind(question, sources).scores(question)
    assert both == pytest.approx([(a + 2 * q) / 3 for a, q in zip(alone, asked, strict=True)])
    # A claim made of words both passages share goes to the one the question is about.
    shared = "The else clause runs"
    assert LexicalEvidence(question_weight=0).bind(question, sources).scores(shared) == [
        pytest.approx(1.0), pytest.approx(1.0)
    ]
    scores = LexicalEvidence().bind(question, sources).scores(shared)
    assert scores[1] > scores[0]
    # ... while a claim only the other source supports still goes there.
    strong = LexicalEvidence().bind(question, sources).scores("No exception was raised")
    assert strong[0] > strong[1]


@pytest.mark.parametrize("value", [-1.0, math.inf, math.nan, True, "1"])
def test_bad_question_weight_raises(value: object) -> None:
    with pytest.raises(ValueError, match="question_weight must be a finite number >= 0, got "):
        LexicalEvidence(question_weight=value)  # type: ignore[arg-type]


def test_lexical_evidence_equality_includes_the_question_weight() -> None:
    assert LexicalEvidence() == LexicalEvidence(question_weight=2.0)
    assert LexicalEvidence() != LexicalEvidence(question_weight=0)
    assert len({LexicalEvidence(), LexicalEvidence(question_weight=2)}) == 1
    assert repr(LexicalEvidence(question_weight=0)) == (
        "LexicalEvidence(weight=16, question_weight=0)"
    )


def test_resolve_evidence() -> None:
    assert resolve_evidence(None) is None
    assert isinstance(resolve_evidence("lexical"), LexicalEvidence)
    assert isinstance(resolve_evidence(" Embedding "), EmbeddingEvidence)
    custom = LexicalEvidence(weight=3)
    assert resolve_evidence(custom) is custom
    with pytest.raises(ValueError, match="unknown evidence scorer 'bm25'.*lexical, embedding"):
        resolve_evidence("bm25")
    with pytest.raises(TypeError, match="evidence must be None, a name"):
        resolve_evidence(True)


@pytest.mark.parametrize("weight", [0, -1.0, math.inf, math.nan, True, "2"])
def test_bad_weight_raises(weight: object) -> None:
    with pytest.raises(ValueError, match="evidence weight must be a positive finite number"):
        LexicalEvidence(weight=weight)  # type: ignore[arg-type]


def test_evidence_base_is_abstract() -> None:
    with pytest.raises(NotImplementedError):
        Evidence(weight=1.0).bind("q", [Source("text")])


def test_opening_a_second_marker_is_worth_no_more_than_the_best_higher_id() -> None:
    # After [2: "]" ends the group on source 2; "][" also opens a marker that can only name 3.
    out, _ = run(["Paris", " [", "2"], [0.1, 0.9, 0.3])
    assert bias(out, "]") == pytest.approx(2 * 0.8)
    assert bias(out, "].") == pytest.approx(2 * 0.8)
    assert bias(out, "][") == pytest.approx(2 * 0.2)
    # A second source as good as the first is not held back.
    out, _ = run(["Paris", " [", "1"], [0.9, 0.1, 0.9])
    assert bias(out, "][") == pytest.approx(bias(out, "]"))


def test_after_a_marker_a_weaker_second_marker_is_held_back() -> None:
    out, support = run(["Paris", " [", "2", "]"], [0.1, 0.9, 0.3])
    assert support.claims == ["Paris"]
    assert bias(out, "[") == pytest.approx(-2 * (0.8 - 0.2))
    assert bias(out, " [") == pytest.approx(-2 * (0.8 - 0.2))
    assert bias(out, ".") == 0.0
    out, _ = run(["Paris", " [", "1", "]"], [0.9, 0.1, 0.9])
    assert bias(out, "[") == 0.0
    out, _ = run(["Paris", " [", "3", "]"], [0.1, 0.2, 0.9])  # no id above 3
    assert bias(out, "[") == pytest.approx(-2 * 0.8)
