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
    for evidence in ("lexical", LexicalEvidence(weight=16.0, question_weight=2.0)):
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


MULTIBYTE = [
    Source("Le café « Flore » ouvrit en 1887 à Paris. Ses habitués écrivaient là. "
           "Zürich’s Café Odeon opened in 1911 — a favourite of writers 🖋.", title="Cafés"),
    Source("東京タワーは1958年に完成した。高さは333メートルである。"
           " Tokyo Tower was completed in 1958 and is 333 m tall.", title="Tokyo"),
]


def test_evidence_spans_of_multibyte_sources_are_character_offsets(
    default_generator: CiteGenerator,
) -> None:
    from tests.conftest import check_evidence_offsets

    for question in ("When was Tokyo Tower completed?", "When did the Café Odeon open?"):
        answer = default_generator.generate(question, MULTIBYTE, max_new_tokens=40)
        print(repr(answer.text), [c.evidence for c in answer.citations])
        assert answer.citations and all(c.evidence is not None for c in answer.citations)
        assert check_evidence_offsets(answer) == len(answer.citations)
        for citation in answer.citations:
            span = citation.evidence
            assert span is not None
            source = answer.source_for(citation).text
            # Offsets count characters, not UTF-8 bytes: the byte offsets of a span after the
            # first non-ASCII character differ.
            assert source.index(span.text) == span.source_start
