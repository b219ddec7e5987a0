"""Evidence reweighting on the embedded SmolLM2-135M-Instruct: the right source, still in range."""

from __future__ import annotations

import pytest

from citeformer import CiteGenerator, Policy, Source, scan_markers
from citeformer.evidence import LexicalEvidence

pytestmark = pytest.mark.integration

QUESTION = "Who was the first person to walk on the Moon?"
SOURCES = [
    Source("Yuri Gagarin was the first human to travel into space, in 1961.", title="Gagarin"),
    Source("Buzz Aldrin was the second person to walk on the Moon.", title="Aldrin"),
    Source(
        "Neil Armstrong was the first person to walk on the Moon, in July 1969.",
        title="Armstrong",
    ),
]


def test_evidence_moves_the_marker_to_the_supporting_source(
    default_generator: CiteGenerator,
) -> None:
    alone = default_generator.generate(QUESTION, SOURCES, max_new_tokens=48, evidence=None)
    print("model alone:", repr(alone.text))
    # Greedy, the model names Armstrong but cites the Gagarin passage.
    assert "Armstrong" in alone.text
    assert [c.source_id for c in alone.citations] == [1]

    default = default_generator.generate(QUESTION, SOURCES, max_new_tokens=48)
    for evidence in ("lexical", LexicalEvidence(weight=8.0)):
        answer = default_generator.generate(QUESTION, SOURCES, max_new_tokens=48,
                                            evidence=evidence)
        assert answer.text == default.text
        print("with evidence:", repr(answer.text))
        assert "Armstrong" in answer.text
        assert [c.source_id for c in answer.citations] == [3]
        assert scan_markers(answer.text, 3).fabricated == 0


@pytest.mark.parametrize("policy", list(Policy))
def test_evidence_keeps_markers_in_range_under_sampling(
    default_generator: CiteGenerator, policy: Policy
) -> None:
    for seed in range(2):
        answer = default_generator.generate(
            QUESTION, SOURCES, policy, max_new_tokens=40, do_sample=True, temperature=1.0,
            seed=seed, evidence=LexicalEvidence(weight=50.0),
        )
        assert scan_markers(answer.text, 3).fabricated == 0, answer.text
        assert all(1 <= c.source_id <= 3 for c in answer.citations)


def test_streamed_answer_with_evidence_matches_generate(default_generator: CiteGenerator) -> None:
    stream = default_generator.stream(QUESTION, SOURCES, max_new_tokens=48)
    text = "".join(stream)
    assert text == stream.answer.text
    assert [c.source_id for c in stream.answer.citations] == [3]


def test_evidence_acts_with_the_grammar_only(default_generator: CiteGenerator) -> None:
    alone = default_generator.generate(QUESTION, SOURCES, max_new_tokens=48, constrained=False,
                                       evidence=None)
    default = default_generator.generate(QUESTION, SOURCES, max_new_tokens=48, constrained=False)
    assert default.text == alone.text


def test_bad_evidence_values_raise_before_generating(default_generator: CiteGenerator) -> None:
    with pytest.raises(ValueError, match="unknown evidence scorer 'bm25'"):
        default_generator.generate(QUESTION, SOURCES, evidence="bm25")
    with pytest.raises(ValueError, match="unknown evidence scorer"):
        default_generator.generate(QUESTION, SOURCES, evidence="bm25", constrained=False)
    with pytest.raises(TypeError, match="evidence must be None, a name"):
        default_generator.stream(QUESTION, SOURCES, evidence=1.5)  # type: ignore[arg-type]
