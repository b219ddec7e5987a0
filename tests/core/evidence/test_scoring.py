"""Evidence scorers: how each source of a call scores against a claim."""

from __future__ import annotations

import math

import pytest

from citeformer import Source
from citeformer.evidence import (
    EmbeddingEvidence,
    Evidence,
    LexicalEvidence,
    claim_before_marker,
    content_words,
    resolve_evidence,
)


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
    match = "question_weight must be a (number|finite number >= 0 and <= 10000), got "
    with pytest.raises(ValueError, match=match):
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
    match = "evidence weight must be a (number|finite number > 0 and <= 10000)"
    with pytest.raises(ValueError, match=match):
        LexicalEvidence(weight=weight)  # type: ignore[arg-type]


def test_evidence_base_is_abstract() -> None:
    with pytest.raises(NotImplementedError):
        Evidence(weight=1.0).bind("q", [Source("text")])
