"""Evidence spans: sentences of a source, the span that supports a claim, spans on answers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from citeformer import Source, build_request, parse_citations
from citeformer.answers import cited_answer
from citeformer.evidence.spans import WEAK_SUPPORT, locate_evidence, sentence_spans, with_evidence

EIFFEL = Source(
    "The Eiffel Tower is a wrought-iron lattice tower in Paris. Construction began in January "
    "1887, and the tower was completed on 31 March 1889.\n\nIt was 300 metres tall. Antennas "
    "later raised it to about 330 metres. Élan: the tower is painted every seven years!"
)


def test_sentences_round_trip_and_split_on_terminators_and_paragraphs() -> None:
    spans = sentence_spans(EIFFEL.text)
    texts = [EIFFEL.text[s:e] for s, e in spans]
    assert texts[1].startswith("Construction began") and texts[1].endswith("1889.")
    assert texts[2] == "It was 300 metres tall."
    assert texts[-1].endswith("seven years!")
    assert len(spans) == 5


@given(st.text(alphabet="ab .!?\n\"é", max_size=80))
def test_sentence_spans_are_trimmed_ordered_and_disjoint(text: str) -> None:
    previous = 0
    for start, end in sentence_spans(text):
        assert previous <= start < end <= len(text)
        assert not text[start].isspace() and not text[end - 1].isspace()
        previous = end


def test_the_supporting_sentence_is_found() -> None:
    span = locate_evidence("The tower was completed on 31 March 1889", EIFFEL)
    assert span is not None
    assert span.text == EIFFEL.text[span.source_start:span.source_end]
    assert span.text.startswith("Construction began") and not span.weak
    assert span.score == pytest.approx(1.0)


def test_a_claim_the_source_does_not_share_is_weak() -> None:
    span = locate_evidence("It was painted gold by visitors from Mars", EIFFEL)
    assert span is not None and span.weak and span.score < WEAK_SUPPORT


def test_two_sentences_when_the_claim_spans_them() -> None:
    span = locate_evidence("It was 300 metres tall until antennas raised it", EIFFEL)
    assert span is not None
    assert span.text == "It was 300 metres tall. Antennas later raised it to about 330 metres."


def test_a_claim_without_content_words_falls_back_to_the_question() -> None:
    span = locate_evidence("It is so", EIFFEL, question="When was it completed?")
    assert span is not None and "completed" in span.text
    assert locate_evidence("It is so", EIFFEL) is None


def test_markers_of_one_group_share_the_claim() -> None:
    text = "It was completed in 1889 [1][2]. It is repainted [2]."
    sources = [EIFFEL, Source("The tower was completed in 1889. It is repainted often.")]
    first, second, third = with_evidence(text, parse_citations(text, 2), sources, "When?")
    spans = [c.evidence.text if c.evidence else None for c in (first, second, third)]
    assert spans[0] is not None and "completed on 31 March 1889" in spans[0]
    assert spans[1:] == ["The tower was completed in 1889.", "It is repainted often."]


def test_every_answer_citation_carries_its_span() -> None:
    request = build_request("When was it completed?", [EIFFEL, "Berlin is in Germany."])
    answer = cited_answer(
        request, "It was completed on 31 March 1889 [1]. Berlin [2].", "stop",
        prompt_tokens=0, generated_tokens=0,
    )
    for citation in answer.citations:
        span = citation.evidence
        assert span is not None
        source = answer.source_for(citation).text
        assert source[span.source_start:span.source_end] == span.text
    assert answer.to_dict()["citations"][0]["evidence"]["text"].startswith("Construction began")


def test_multibyte_offsets_are_character_offsets() -> None:
    span = locate_evidence("Élan: painted every seven years", EIFFEL)
    assert span is not None
    assert EIFFEL.text[span.source_start:span.source_end] == span.text
    assert span.text.startswith("Élan")


def test_full_width_stops_end_sentences() -> None:
    text = "東京タワーは1958年に完成した。「高さは333メートル。」 Tokyo Tower is 333 m tall."
    assert [text[s:e] for s, e in sentence_spans(text)] == [
        "東京タワーは1958年に完成した。", "「高さは333メートル。」", "Tokyo Tower is 333 m tall.",
    ]


@pytest.mark.parametrize(("text", "sentences"), [
    ("2. Probation. It lasts a month.\n3. Notice. It is 3 months.",
     ["2. Probation.", "It lasts a month.", "3. Notice.", "It is 3 months."]),
    ("It ends here.\n3.\n\nNotice. Three months.",  # a label before a page break
     ["It ends here.", "3.\n\nNotice.", "Three months."]),
    ("(b) Scope. It covers all. iv. Terms. None.",
     ["(b) Scope.", "It covers all.", "iv. Terms.", "None."]),
    ("Send it, e.g. by post. See No. 5 and Dr. Smith. Then stop.",
     ["Send it, e.g. by post.", "See No. 5 and Dr. Smith.", "Then stop."]),
    ("It was version 3. Then 4 came.", ["It was version 3.", "Then 4 came."]),
    ("A note e.g.\n\nA new paragraph.", ["A note e.g.", "A new paragraph."]),
])
def test_sentences_keep_clause_numbers_and_abbreviations(text: str, sentences: list[str]) -> None:
    assert [text[s:e] for s, e in sentence_spans(text)] == sentences


def test_a_clause_number_is_no_word_of_its_clause() -> None:
    source = Source("The trial lasts six months with one week of notice.\n3. The notice period "
                    "is long.")
    span = locate_evidence("The trial is 3 months", source)
    assert span is not None and span.text.startswith("The trial lasts")
