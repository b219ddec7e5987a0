"""``CitedAnswer.from_dict``: an answer read back is checked as strictly as a generated one."""

from __future__ import annotations

import copy
import json
import math

import pytest

from citeformer import CitedAnswer, Policy, Source, build_request
from citeformer.answers import cited_answer
from citeformer.errors import CiteformerError, InputTypeError, InvalidInputError
from citeformer.render import to_html, to_markdown

SOURCES = [
    Source("The Eiffel Tower was completed on 31 March 1889.", title="Eiffel"),
    Source("Apollo 11 landed on the Moon on 20 July 1969.", title="Apollo"),
]


def answer_of(text: str, **options: object) -> CitedAnswer:
    request = build_request("When was the tower completed?", SOURCES, **options)
    return cited_answer(request, text, "stop", prompt_tokens=40, generated_tokens=12)


def stored(text: str = "It was completed in 1889 [1]. Apollo landed in 1969 [2].") -> dict:
    return json.loads(json.dumps(answer_of(text).to_dict()))


@pytest.mark.parametrize("answer", [
    answer_of("It was completed in 1889 [1]. Apollo landed in 1969 [2][1]."),
    answer_of("It says \"completed on 31 March 1889\" [1].", policy=Policy.QUOTES_ONLY),
    answer_of("It was completed in 1889 [7], says [1].", constrained=False),
    answer_of("Nothing cites here."),
])
def test_what_to_dict_wrote_reads_back_equal(answer: CitedAnswer) -> None:
    data = json.loads(json.dumps(answer.to_dict()))
    again = CitedAnswer.from_dict(data)
    assert again == answer
    for read, written in zip(again.citations, answer.citations, strict=True):
        assert (read.evidence is None) == (written.evidence is None)
        if read.evidence is not None and written.evidence is not None:  # to_dict rounds scores
            assert read.evidence.score == round(written.evidence.score, 4)
            assert read.evidence.text == written.evidence.text


def test_a_dict_of_an_earlier_version_without_constrained_reads_as_constrained() -> None:
    data = stored()
    del data["constrained"]
    assert CitedAnswer.from_dict(data).constrained


def altered(change) -> dict:
    data = stored()
    change(data)
    return data


def _set(path: tuple, value: object):
    def change(data: dict) -> None:
        target = data
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return change


@pytest.mark.parametrize(("change", "error", "named"), [
    # markers in the text that name no source, or are not listed
    (_set(("text",), "It was completed in 1889 [7]. Apollo landed in 1969 [2]."),
     InvalidInputError, r"holds '\[7\]' at 25, which names none of the 2 sources"),
    (lambda d: d.update(sources=[], citations=[]), InvalidInputError,
     r"holds '\[1\]' but there are no sources"),
    (lambda d: d["citations"].pop(), InvalidInputError,
     r"citations list \[\[1\]@25\] but the text holds \[\[1\]@25, \[2\]@52\]"),
    (_set(("citations", 0, "source_id"), 2), InvalidInputError,
     r"citations\[0\].evidence: 0:48 of source 2 is not its text"),
    (lambda d: d["citations"][0].update(source_id=2, evidence=None), InvalidInputError,
     r"citations list \[\[2\]@25, \[2\]@52\] but the text holds \[\[1\]@25"),
    (_set(("citations", 1, "source_id"), 3), InvalidInputError,
     r"citations\[1\]: source_id 3 names none of the 2 sources"),
    (_set(("abstained",), True), InvalidInputError, "abstained, yet the text holds markers"),
    # exact types
    (_set(("abstained",), "false"), InputTypeError, "abstained must be bool, got 'false'"),
    (_set(("prompt_tokens",), True), InputTypeError, "prompt_tokens must be int, got True"),
    (_set(("prompt_tokens",), -1), InvalidInputError, "prompt_tokens must be >= 0"),
    (_set(("generated_tokens",), "12"), InputTypeError, "generated_tokens must be int"),
    (_set(("citations", 0, "start"), 10 ** 400), InvalidInputError,
     r"citations list \[\[1\]@an int of about 401 digits"),
    (_set(("citations", 0, "source_id"), 1.0), InputTypeError,
     r"citations\[0\].source_id must be int, got 1.0"),
    (_set(("citations", 0, "evidence", "score"), math.nan), InvalidInputError,
     r"citations\[0\].evidence.score must be a finite number"),
    (_set(("citations", 0, "evidence", "score"), 10 ** 400), InvalidInputError,
     r"evidence.score must be a finite number"),
    (_set(("citations", 0, "evidence", "weak"), 0), InputTypeError, "weak must be bool"),
    (_set(("citations", 0, "evidence", "text"), "Apollo"), InvalidInputError,
     r"citations\[0\].evidence: \d+:\d+ of source 1 is not its text"),
    (_set(("sources", 0, "text"), 3), InputTypeError, r"sources\[0\].text must be str"),
    (_set(("sources", 1, "id"), 5), InvalidInputError,
     r"sources\[1\]: id is 5, not its position 2"),
    (_set(("sources",), "abc"), InputTypeError, "sources must be a list, got 'abc'"),
    (_set(("finish_reason",), "done"), InvalidInputError, "finish_reason must be 'stop' or"),
    (lambda d: d.pop("text"), InvalidInputError, "answer has no 'text'"),
    (_set(("refusal",), {"band": "maybe"}), InvalidInputError, "refusal has no 'measure'"),
    (_set(("constrained",), "yes"), InputTypeError, "constrained must be bool"),
])
def test_an_altered_dict_is_refused_naming_the_field(change, error, named) -> None:
    with pytest.raises(error, match=named) as raised:
        CitedAnswer.from_dict(altered(change))
    assert isinstance(raised.value, CiteformerError)


@pytest.mark.parametrize("data", [None, 3, "text", ["text"]])
def test_what_is_no_dict_is_refused(data: object) -> None:
    with pytest.raises(InputTypeError, match="answer must be a dict"):
        CitedAnswer.from_dict(data)  # type: ignore[arg-type]


def test_a_quote_must_be_where_it_says() -> None:
    answer = answer_of("It says \"completed on 31 March 1889\" [1].", policy=Policy.QUOTES_ONLY)
    data = copy.deepcopy(answer.to_dict())
    data["quotes"][0]["start"] += 1
    with pytest.raises(InvalidInputError, match=r"quotes\[0\]: \d+:\d+ of the answer"):
        CitedAnswer.from_dict(data)


def test_an_unconstrained_answers_made_up_marker_is_no_link() -> None:
    answer = answer_of("It was completed in 1889 [7], says [1].", constrained=False)
    again = CitedAnswer.from_dict(answer.to_dict())
    assert not again.constrained
    assert [c.source_id for c in again.citations] == [1]
    markdown = to_markdown(again)
    assert "#ref-7" not in markdown and "\\[7\\]" in markdown and "#ref-1" in markdown
    html = to_html(again)
    assert "#ref-7" not in html and "[7]" in html and 'href="#ref-1"' in html


def test_a_generated_constrained_answer_says_so() -> None:
    assert answer_of("It was completed in 1889 [1].").constrained
    assert not answer_of("It was completed in 1889 [1].", constrained=False).constrained


def test_a_refusal_offered_to_every_answer_reads_back() -> None:
    # Refusal(offer_below=math.inf) offers the refusal to every answer not refused outright.
    from citeformer import Refusal

    offered = answer_of("It was completed in 1889 [1].",
                        refusal=Refusal(threshold=0.0, offer_below=math.inf))
    assert offered.refusal is not None and offered.refusal.offer_below == math.inf
    data = json.loads(json.dumps(offered.to_dict()))
    assert CitedAnswer.from_dict(data).refusal == offered.refusal
    data["refusal"]["offer_below"] = 1.5
    with pytest.raises(InvalidInputError, match=r"refusal.offer_below must be a finite number"):
        CitedAnswer.from_dict(data)
