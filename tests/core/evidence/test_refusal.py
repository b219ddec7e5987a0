"""Grounded refusal: the support measures, the bands, and what a request does in each."""

from __future__ import annotations

import itertools
import json
import math
import time

import pytest
import xgrammar as xgr
from xgrammar.testing import _is_grammar_accept_string

from citeformer import (
    CitedAnswer,
    InputTypeError,
    InvalidInputError,
    Policy,
    Refusal,
    RefusalCheck,
    Source,
    build_request,
)
from citeformer.decoding.payload import request_from_payload, steering_payload
from citeformer.evidence.refusal import (
    DEFAULT_REFUSAL_TEXT,
    DEFAULT_THRESHOLDS,
    PAIRED_SOURCES,
    Band,
    lexical_cover,
    lexical_support,
    question_words,
)
from citeformer.evidence.scoring import content_words
from citeformer.grammar.rules import render_grammar
from citeformer.testing import FakeGenerator

TOWER = [
    Source("The Eiffel Tower was completed on 31 March 1889.", title="Eiffel Tower"),
    Source("Honey bees communicate with a waggle dance."),
]
ANSWERED = "When was the Eiffel Tower completed?"
OFF_TOPIC = "What is the capital of Peru?"
OFFERED = Refusal(threshold=0.1, offer_below=math.inf)


def accepts(grammar: str, text: str) -> bool:
    return bool(_is_grammar_accept_string(xgr.Grammar.from_ebnf(grammar), text))


# -- support -------------------------------------------------------------------------------------


def test_lexical_support_is_the_best_sources_share_of_the_questions_content_words() -> None:
    assert lexical_support(ANSWERED, TOWER) == 1.0  # eiffel, tower, completed: all in source 1
    assert lexical_support(OFF_TOPIC, TOWER) == 0.0  # capital, peru: in neither
    assert lexical_support("Who designed the tower in Peru?", TOWER) == pytest.approx(1 / 3)
    assert lexical_support("What is it?", TOWER) == 1.0  # nothing to weigh: never refused


@pytest.mark.parametrize("asked", [
    "According to the documents, when was the Eiffel Tower completed? Cite your source [2].",
    "Please explain briefly, quoting the passage: when was the Eiffel Tower completed?",
    "When was the Eiffel Tower completed? You must cite your answer as [7] and [0].",
])
def test_how_the_answer_is_asked_for_does_not_dilute_what_it_is_about(asked: str) -> None:
    assert question_words(asked) == {"eiffel", "tower", "completed"}
    assert lexical_support(asked, TOWER) == 1.0
    assert Refusal().band(asked, TOWER) is Band.ANSWER


@pytest.mark.parametrize("asked", [
    "Summarize the documents.",
    "What does source 1 say, word for word? Quote it.",
    "Quote the first passage verbatim [1].",
    "What does document #2 say?",
])
def test_a_question_about_the_sources_themselves_is_never_refused(asked: str) -> None:
    assert question_words(asked) == set()
    assert lexical_support(asked, TOWER) == 1.0
    assert Refusal().band(asked, TOWER) is Band.ANSWER


def test_a_source_pointer_leaves_the_rest_weighed() -> None:
    assert question_words("What does source 2 say about honey bees?") == {"honey", "bees"}
    assert Refusal().band("What does source 2 say about Peru?", TOWER) is Band.REFUSE


def test_the_title_counts_as_the_sources_words() -> None:
    source = Source("It was completed in 1889.", title="Eiffel Tower")
    assert lexical_support("When was the Eiffel Tower completed?", [source]) == 1.0
    assert lexical_support("When was the Eiffel Tower completed?", [Source(source.text)]) < 0.5


def test_the_bands() -> None:
    assert Refusal().band(OFF_TOPIC, TOWER) is Band.REFUSE
    assert Refusal().band(ANSWERED, TOWER) is Band.ANSWER
    assert OFFERED.band(ANSWERED, TOWER) is Band.OFFER
    assert OFFERED.band(OFF_TOPIC, TOWER) is Band.REFUSE
    assert Refusal(threshold=0).band(OFF_TOPIC, TOWER) is Band.ANSWER  # 0: never refused
    assert Refusal(threshold=0, offer_below=0.5).band(OFF_TOPIC, TOWER) is Band.OFFER


def test_a_follow_up_is_weighed_with_the_users_turn_before_it() -> None:
    history = [("user", "Tell me about the Eiffel Tower."), ("assistant", "It is in Paris [1].")]
    assert Refusal().band("When was it completed?", TOWER) is Band.ANSWER  # "completed" is there
    assert Refusal().band("And its height?", TOWER) is Band.REFUSE
    assert Refusal(threshold=0.4).band("And its height in meters?", TOWER) is Band.REFUSE
    assert Refusal(threshold=0.4).band("And its height in meters?", TOWER, history) is Band.ANSWER


def test_the_reason_names_the_support_the_threshold_and_the_words_no_source_holds() -> None:
    assert Refusal().explain(OFF_TOPIC, TOWER) == (
        'support 0.00 < threshold 0.5 (lexical: the best passage, or pair of passages, holds 0 '
        'of the question\'s 2 words, not "capital", "peru")'
    )
    assert Refusal().explain("Who designed the tower in Peru?", TOWER).startswith(
        "support 0.33 < threshold 0.5 (lexical: the best passage, or pair of passages, holds 1 "
    )
    assert Refusal().explain(ANSWERED, TOWER) == (
        "support 1.00 >= threshold 0.5 (lexical: the best passage, or pair of passages, holds 3 "
        "of the question's 3 words)"
    )
    assert OFFERED.explain(ANSWERED, TOWER).startswith(
        "support 1.00 in [0.1, inf): the model chose between the refusal and a cited answer"
    )
    assert Refusal().explain("What is it?", TOWER).endswith("names nothing to look for)")


def test_the_reason_of_a_follow_up_counts_the_words_of_the_turn_it_was_weighed_with() -> None:
    history = [("user", "Tell me about the Eiffel Tower."), ("assistant", "It is in Paris [1].")]
    alone = Refusal(threshold=0.4).explain("And its height in meters?", TOWER)
    assert alone.startswith("support 0.00 < threshold 0.4")
    assert alone.endswith('not "height", "meter")')  # the words as counted
    together = Refusal(threshold=0.4).explain("And its height in meters?", TOWER, history)
    assert together.startswith("support 0.50 >= threshold 0.4")
    assert "2 of the question's 4 words" in together


def test_the_default_threshold_is_the_measures() -> None:
    assert Refusal().limit == DEFAULT_THRESHOLDS["lexical"]
    assert Refusal(support="embedding").limit == DEFAULT_THRESHOLDS["embedding"]
    assert Refusal(threshold=0.7).limit == 0.7


@pytest.mark.parametrize(("options", "error", "message"), [
    ({"text": "  "}, InvalidInputError, "non-blank string, got '  '"),
    ({"text": 3}, InvalidInputError, "non-blank string, got 3"),
    ({"text": "None [1]."}, InvalidInputError, "without brackets or double quotes"),
    ({"text": 'Say "no".'}, InvalidInputError, "without brackets or double quotes"),
    ({"text": "Two\nlines."}, InvalidInputError, "one line"),
    ({"text": "x" * 501}, InvalidInputError, "at most 500 characters"),
    ({"text": "No\x00answer."}, InvalidInputError, "holds U\\+0000 at character 2"),
    ({"text": "No\tanswer."}, InvalidInputError, "holds U\\+0009 .* control character"),
    ({"text": "No \ud800."}, InvalidInputError, "holds U\\+D800 .* lone surrogate"),
    ({"support": "bm25"}, InvalidInputError, "one of lexical, embedding, got 'bm25'"),
    ({"threshold": -0.1}, InvalidInputError,
     "threshold must be a finite number >= 0 and <= 1, got -0.1"),
    ({"threshold": math.nan}, InvalidInputError, "threshold must be a finite number >= 0"),
    ({"threshold": 1.5}, InvalidInputError, "threshold must be a finite number >= 0 and <= 1"),
    ({"threshold": True}, InputTypeError, "threshold must be a number, got bool True"),
    ({"offer_below": "high"}, InputTypeError, r"offer_below \(or math.inf\) must be a number"),
    ({"offer_below": 1.5}, InvalidInputError, r"offer_below \(or math.inf\) must be a finite"),
    ({"threshold": 0.5, "offer_below": 0.2}, InvalidInputError, r"offer_below \(0.2\) is below"),
])
def test_a_bad_refusal_names_the_value(options, error, message) -> None:
    with pytest.raises(error, match=message):
        Refusal(**options)


# -- a request in each band --------------------------------------------------------------------


def test_a_request_the_sources_do_not_answer_is_refused_without_a_model() -> None:
    request = build_request(OFF_TOPIC, TOWER)
    assert request.refusal_band is Band.REFUSE
    answer = request.refused()
    assert answer is not None and answer.abstained
    assert answer.text == DEFAULT_REFUSAL_TEXT and answer.citations == ()
    assert (answer.finish_reason, answer.generated_tokens) == ("stop", 0)
    assert answer.to_dict()["abstained"] is True
    assert request.abstains(DEFAULT_REFUSAL_TEXT) and not request.abstains("Lima [1].")
    assert request.refusal_support == 0.0
    assert request.refusal_reason() == Refusal().explain(OFF_TOPIC, TOWER)
    assert answer.refusal == RefusalCheck(
        measure="lexical", support=0.0, threshold=0.5, offer_below=None, band="refuse",
        reason=request.refusal_reason(),
    )
    assert '"capital", "peru"' in answer.refusal.reason


def test_every_answer_carries_what_weighing_its_question_gave() -> None:
    answered = FakeGenerator("It was completed in 1889 [1].").answer(build_request(ANSWERED, TOWER))
    check = answered.refusal
    assert check is not None and (check.band, check.support, check.threshold) == ("answer", 1, 0.5)
    assert check.reason.startswith("support 1.00 >= threshold 0.5")
    offered = build_request(ANSWERED, TOWER, refusal=Refusal(threshold=0.2, offer_below=math.inf))
    chosen = FakeGenerator(DEFAULT_REFUSAL_TEXT).answer(offered)
    assert chosen.abstained and chosen.refusal is not None and chosen.refusal.band == "offer"
    assert chosen.refusal.offer_below == math.inf and "the model chose" in chosen.refusal.reason
    for request in (build_request(ANSWERED, TOWER, refusal=None),
                    build_request(ANSWERED, TOWER, constrained=False),
                    build_request(ANSWERED, TOWER, refusal=Refusal(threshold=0))):
        assert FakeGenerator("It was completed in 1889 [1].").answer(request).refusal is None


def test_the_check_survives_to_dict_and_from_dict() -> None:
    refused = build_request(OFF_TOPIC, TOWER).refused()
    assert refused is not None
    data = json.loads(json.dumps(refused.to_dict()))
    assert data["refusal"]["band"] == "refuse" and data["refusal"]["support"] == 0.0
    assert CitedAnswer.from_dict(data) == refused
    unweighed = FakeGenerator("x [1].").answer(build_request(ANSWERED, TOWER, refusal=None))
    assert unweighed.to_dict()["refusal"] is None
    assert CitedAnswer.from_dict(unweighed.to_dict()) == unweighed
    data["refusal"]["band"] = "maybe"
    with pytest.raises(InvalidInputError, match="refusal band must be .* got 'maybe'"):
        CitedAnswer.from_dict(data)


def test_refusal_none_and_an_unconstrained_request_always_answer() -> None:
    for request in (build_request(OFF_TOPIC, TOWER, refusal=None),
                    build_request(OFF_TOPIC, TOWER, constrained=False)):
        assert request.refusal_band is Band.ANSWER and request.refused() is None
        assert request.refusal_support is None and request.refusal_reason() is None
    assert not build_request(OFF_TOPIC, TOWER, refusal=None).abstains(DEFAULT_REFUSAL_TEXT)


def test_an_answered_request_has_neither_the_sentence_in_its_grammar_nor_its_prompt() -> None:
    request = build_request(ANSWERED, TOWER)
    assert request.refusal_band is Band.ANSWER and request.refused() is None
    assert DEFAULT_REFUSAL_TEXT not in request.grammar_text(spell_quotes=False)
    assert DEFAULT_REFUSAL_TEXT not in str(request.messages())


@pytest.mark.parametrize("policy", list(Policy))
def test_offered_the_refusal_the_grammar_takes_it_as_the_whole_answer(policy) -> None:
    request = build_request(ANSWERED, TOWER, policy, refusal=OFFERED)
    assert request.offered_refusal == DEFAULT_REFUSAL_TEXT and request.refused() is None
    grammar = request.grammar_text(spell_quotes=False)
    assert accepts(grammar, DEFAULT_REFUSAL_TEXT)
    assert not accepts(grammar, "It was completed [3].")  # still no missing source
    system = request.messages()[0]["content"]
    assert system.endswith(f"write only: {DEFAULT_REFUSAL_TEXT}")


def test_under_required_only_the_exact_sentence_goes_uncited() -> None:
    grammar = build_request(ANSWERED, TOWER, refusal=OFFERED).grammar_text(spell_quotes=False)
    assert not accepts(grammar, "The sources do not answer this.")
    assert not accepts(grammar, f"{DEFAULT_REFUSAL_TEXT} It was 1889 [1].")
    assert accepts(grammar, "It was completed in 1889 [1].")
    plain = build_request(ANSWERED, TOWER, refusal=None).grammar_text(spell_quotes=False)
    assert not accepts(plain, DEFAULT_REFUSAL_TEXT)


def test_a_custom_sentence_is_the_one_allowed() -> None:
    refusal = Refusal(text="Not in the documents.", threshold=0.1, offer_below=math.inf)
    request = build_request(ANSWERED, TOWER, refusal=refusal)
    assert accepts(request.grammar_text(spell_quotes=False), "Not in the documents.")
    assert build_request(OFF_TOPIC, TOWER, refusal=refusal).refused().text == refusal.text


def test_render_grammar_rejects_a_sentence_that_breaks_it() -> None:
    with pytest.raises(InvalidInputError, match="refusal"):
        render_grammar(2, Policy.REQUIRED, build_request(ANSWERED, TOWER).grammar,
                       refusal='a "quoted" one')


def test_a_refusal_that_is_not_one_is_a_type_error() -> None:
    with pytest.raises(InputTypeError, match="refusal must be a .*Refusal or None, got str"):
        build_request(ANSWERED, TOWER, refusal="no")


def test_a_server_gets_the_offered_sentence_in_the_payload_and_nothing_else() -> None:
    offered = build_request(ANSWERED, TOWER, refusal=OFFERED)
    served = request_from_payload(steering_payload(offered))
    assert served.offered_refusal == DEFAULT_REFUSAL_TEXT
    assert served.grammar_text(spell_quotes=False) == offered.grammar_text(spell_quotes=False)
    plain = request_from_payload(steering_payload(build_request(ANSWERED, TOWER)))
    assert plain.refusal is None and plain.offered_refusal is None
    with pytest.raises(InputTypeError, match="refusal must be null or a string, got 3"):
        request_from_payload(steering_payload(offered).replace(
            f'"refusal":"{DEFAULT_REFUSAL_TEXT}"', '"refusal":3'))


def test_a_processors_refusal_is_offered_without_weighing(monkeypatch: pytest.MonkeyPatch) -> None:
    # What a serving engine's processor is told: the band is known, nothing is weighed.
    from citeformer.evidence import refusal as module

    offered = Refusal(text="No.", threshold=0.0, offer_below=math.inf)
    assert offered.known_band() is Band.OFFER
    assert Refusal(text="No.").known_band() is None  # a threshold: the support decides

    def weighed(*_: object) -> None:
        raise AssertionError("weighed")

    monkeypatch.setattr(module, "lexical_cover", weighed)
    request = build_request("What is the capital of Peru?", [Source("Lima.")], refusal=offered)
    assert request.offered_refusal == "No."


def test_pairs_are_weighed_among_the_sources_holding_most() -> None:
    words = [f"w{i}" for i in range(12)]
    question = "Explain " + " ".join(words) + "?"
    # The best pair (all twelve words) among many sources holding fewer words each.
    crowd = [Source(" ".join(words[i % 4: i % 4 + 3])) for i in range(3000)]
    halves = [Source(" ".join(words[:6])), Source(" ".join(words[6:]))]
    sources = [*crowd[:1000], halves[0], *crowd[1000:], halves[1]]
    started = time.perf_counter()
    held = lexical_cover(question, sources)[1]
    assert held == set(words)
    assert time.perf_counter() - started < 2.0  # 3,002 sources: pairs of 32, not of 3,002


@pytest.mark.parametrize("count", [2, 5, 10, PAIRED_SOURCES])
def test_every_pair_is_weighed_up_to_the_bound(count: int) -> None:
    # Up to PAIRED_SOURCES distinct sources, the same cover as weighing every pair.
    words = [f"w{i}" for i in range(count + 1)]
    question = "Explain " + " ".join(words) + "?"
    sources = [Source(f"{words[i]} {words[(i * 7 + 3) % len(words)]}") for i in range(count)]
    asked = question_words(question)
    held = [asked & set(content_words(s.text)) for s in sources]
    best = max((len(a | b) for a, b in itertools.combinations(held, 2)), default=0)
    assert len(lexical_cover(question, sources)[1]) == max(best, *map(len, held))
