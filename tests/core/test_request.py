"""build_request: one place that checks a call's arguments, and what the request derives."""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import pytest

from citeformer import (
    CiteformerError,
    EmptyQuestionError,
    EmptySourceError,
    GenerationRequest,
    GrammarOptions,
    InputTypeError,
    InvalidInputError,
    NoSourcesError,
    Policy,
    Source,
    build_request,
)
from citeformer.errors import MAX_BIAS
from citeformer.evidence import EmbeddingEvidence, LexicalEvidence
from citeformer.evidence.refusal import Refusal
from citeformer.grammar.rules import OPTION_LIMITS
from citeformer.readability import MAX_COUNT, Readability
from citeformer.request import GENERATOR_DEFAULT

SOURCES = ["Paris is the capital of France.", "Berlin is the capital of Germany."]

# (keyword arguments, error class, a fragment the message must hold)
BAD_OPTIONS: list[tuple[dict[str, object], type[Exception], str]] = [
    ({"max_new_tokens": 0}, InvalidInputError,
     "max_new_tokens must be an int from 1 to 2147483647, got 0"),
    ({"max_new_tokens": 2.5}, InputTypeError, "max_new_tokens must be an int from 1"),
    ({"max_new_tokens": True}, InputTypeError, "max_new_tokens must be an int from 1"),
    ({"temperature": math.inf}, InvalidInputError,
     "temperature must be a finite number >= 0.01 and <= 100, got inf"),
    ({"temperature": math.nan}, InvalidInputError, "temperature must be a finite number >= 0.01"),
    ({"temperature": 0}, InvalidInputError,
     "temperature must be a finite number >= 0.01 and <= 100, got 0; use do_sample=False"),
    ({"temperature": -1.0}, InvalidInputError, "got -1.0"),
    ({"temperature": "hot"}, InputTypeError, "temperature must be a number, got str 'hot'"),
    ({"seed": 2**64}, InvalidInputError, "seed must be between 0 and 2**63-1"),
    ({"seed": 10**400}, InvalidInputError, "2**63-1, got an int of about 401 digits"),
    ({"seed": -1}, InvalidInputError, "seed must be between 0 and 2**63-1"),
    ({"seed": "x"}, InputTypeError, "seed must be an int or None, got str 'x'"),
    ({"seed": 1.0}, InputTypeError, "seed must be an int or None"),
    ({"do_sample": "yes"}, InputTypeError, "do_sample must be True or False"),
    ({"constrained": 1}, InputTypeError, "constrained must be True or False"),
    ({"prompt": ""}, InvalidInputError, "prompt is empty"),
    ({"prompt": 3}, InputTypeError, "prompt must be a string or None"),
    ({"instructions": "  "}, InvalidInputError, "instructions is empty"),
    ({"evidence": "bm25"}, InvalidInputError, "unknown evidence scorer 'bm25'"),
    ({"evidence": 3}, InputTypeError, "evidence must be None"),
    ({"max_group": 0}, InvalidInputError, "max_group must be a positive int, got 0"),
    ({"verbatim_quotes": "no"}, InputTypeError, "verbatim_quotes must be True or False"),
    ({"min_quote_chars": 9, "max_quote_chars": 4}, InvalidInputError,
     "min_quote_chars (9) is larger than max_quote_chars (4)"),
    ({"max_sentence_wrods": 9}, InputTypeError, "unknown option(s) ['max_sentence_wrods']"),
]


@pytest.mark.parametrize(("options", "error", "message"), BAD_OPTIONS)
def test_bad_options_name_the_value(
    options: dict[str, object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as raised:
        build_request("Capital?", SOURCES, **options)  # type: ignore[arg-type]
    assert message in str(raised.value)
    assert isinstance(raised.value, CiteformerError)
    assert isinstance(raised.value, ValueError)


@pytest.mark.parametrize(
    ("question", "sources", "error"),
    [
        ("", SOURCES, EmptyQuestionError),
        ("   ", SOURCES, EmptyQuestionError),
        (None, SOURCES, EmptyQuestionError),
        ("Capital?", [], NoSourcesError),
        ("Capital?", ["ok", "  "], EmptySourceError),
        ("Capital?", "one passage", InputTypeError),
        ("Capital?", [3], InputTypeError),
    ],
)
def test_bad_question_or_sources(question: object, sources: object, error: type) -> None:
    with pytest.raises(error):
        build_request(question, sources)  # type: ignore[arg-type]


# Every number a request holds but the seed (its own table above), by what takes it:
# (maker, keyword, the least and the most it takes).
RANGES: list[tuple[Callable[..., object], str, float, float]] = [
    (partial(build_request, "Capital?", SOURCES), "max_new_tokens", 1, 2**31 - 1),
    (partial(build_request, "Capital?", SOURCES), "temperature", 0.01, 100.0),
    *[(partial(build_request, "Capital?", SOURCES), name, 1, limit)
      for name, limit in OPTION_LIMITS.items() if name != "min_quote_chars"],
    *[(Readability, name, 0.0, MAX_BIAS)
      for name in ("number_penalty", "code_penalty", "end_bias", "wrap_up_bias")],
    *[(Readability, name, 0.0, 1.0) for name in ("auto_cite_support", "clause_support")],
    *[(Readability, name, 0, MAX_COUNT) for name in (
        "no_repeat_ngram", "no_repeat_words", "max_punctuation_run", "min_claim_words",
        "wrap_up_words",
    )],
    (LexicalEvidence, "weight", 1e-9, MAX_BIAS),  # above 0
    (LexicalEvidence, "question_weight", 0.0, MAX_BIAS),
    (EmbeddingEvidence, "weight", 1e-9, MAX_BIAS),
    (Refusal, "threshold", 0.0, 1.0),
    (partial(Refusal, threshold=0.0), "offer_below", 0.0, 1.0),
]
RANGE_IDS = [f"{getattr(make, 'func', make).__name__}.{name}" for make, name, *_ in RANGES]
# Out of every range: a float whose product with a logit overflows float32, an int too large
# for a float, NaN, the infinities, and a bool (a number to Python).
OUT_OF_RANGE = [
    pytest.param(10**400, id="400-digit int"), pytest.param(-(10**400), id="-400-digit int"),
    pytest.param(1e308, id="1e308"), pytest.param(-1e308, id="-1e308"),
    pytest.param(math.nan, id="nan"), pytest.param(math.inf, id="inf"),
    pytest.param(-math.inf, id="-inf"), pytest.param(True, id="True"),
]


@pytest.mark.parametrize("value", OUT_OF_RANGE)
@pytest.mark.parametrize(("make", "name", "low", "high"), RANGES, ids=RANGE_IDS)
def test_every_number_out_of_its_range_is_refused_naming_it(
    make: Callable[..., object], name: str, low: float, high: float, value: object
) -> None:
    if name == "offer_below" and value == math.inf:
        return  # the documented "offer it to every answer"
    with pytest.raises(InvalidInputError) as raised:
        make(**{name: value})
    message = str(raised.value)
    assert name in message and isinstance(raised.value, ValueError)
    assert len(message) < 300  # a 400-digit int is named by its length, not written out


@pytest.mark.parametrize(("make", "name", "low", "high"), RANGES, ids=RANGE_IDS)
def test_every_range_is_kept_to_its_ends(
    make: Callable[..., object], name: str, low: float, high: float
) -> None:
    make(**{name: low})
    make(**{name: high})
    past, shown = (high + 1, f"{high}") if isinstance(high, int) else (high * 1.001, f"{high:g}")
    with pytest.raises(InvalidInputError, match=f"{name} .*(to|<=|at most) {shown}, got"):
        make(**{name: past})


def test_type_errors_are_also_type_errors() -> None:
    with pytest.raises(TypeError, match="temperature must be a number"):
        build_request("Capital?", SOURCES, temperature="hot")  # type: ignore[typeddict-item]


def test_unknown_policy_is_a_citeformer_value_error() -> None:
    with pytest.raises(InvalidInputError, match="unknown citation policy 'sometimes'"):
        build_request("Capital?", SOURCES, "sometimes")


def test_defaults_and_coercion() -> None:
    request = build_request("Capital?", SOURCES, "AUTO", temperature=2, max_group=2)
    assert request.policy is Policy.AUTO
    assert request.temperature == 2.0 and isinstance(request.temperature, float)
    assert request.sources == tuple(Source(text) for text in SOURCES)
    assert request.n_sources == 2
    assert request.grammar == GrammarOptions(max_group=2)
    # Evidence is left to the generator until one resolves it: lexical where it steers.
    assert request.evidence is GENERATOR_DEFAULT
    assert isinstance(request.default_evidence, LexicalEvidence)
    assert request.evidence_or(None) is None


def test_explicit_evidence_is_the_callers() -> None:
    lexical = build_request("Q?", SOURCES, evidence="lexical")
    assert isinstance(lexical.evidence, LexicalEvidence)
    assert isinstance(lexical.evidence_or(None), LexicalEvidence)
    none = build_request("Q?", SOURCES, evidence=None)
    assert none.evidence is None and none.default_evidence is None
    assert build_request("Q?", SOURCES, evidence="default").evidence is GENERATOR_DEFAULT
    assert repr(GENERATOR_DEFAULT) == "GENERATOR_DEFAULT"


def test_the_option_lists_are_the_request_fields() -> None:
    from dataclasses import fields

    from citeformer.request import OPTION, GenerationOptions, option_names, request_option_names

    # The options are the fields marked so, never found by their place among the fields.
    marked = [spec.name for spec in fields(GenerationRequest) if spec.metadata == OPTION]
    unmarked = [spec.name for spec in fields(GenerationRequest) if not spec.metadata]
    assert unmarked == ["question", "sources", "policy"]
    assert request_option_names() == tuple(marked)
    assert option_names() == (*marked, *GrammarOptions.names())
    # The typed keywords of generate() are the same list, in the same order.
    assert tuple(GenerationOptions.__annotations__) == option_names()


def test_the_options_follow_their_marks_not_their_place(monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    from citeformer.integration import setting_names
    from citeformer.request import request_option_names

    # A field moved elsewhere among the fields is still the option it was.
    real = dataclasses.fields

    def reordered(cls: object) -> tuple[dataclasses.Field[object], ...]:
        specs = real(cls)  # type: ignore[arg-type]
        if cls is not GenerationRequest:
            return specs
        return (specs[-1], *specs[:-1])

    monkeypatch.setattr("citeformer.request.fields", reordered)
    assert request_option_names()[0] == "refusal"
    assert "refusal" in setting_names() and "question" not in setting_names()


def test_a_template_is_checked_once_and_filled_per_call() -> None:
    from citeformer.request import request_template

    template = request_template("auto", max_new_tokens=8, max_group=1)
    request = template.replace(question="Capital?", sources=SOURCES, temperature=0.5)
    assert (request.question, request.n_sources, request.policy) == ("Capital?", 2, Policy.AUTO)
    assert (request.max_new_tokens, request.grammar.max_group, request.temperature) == (8, 1, 0.5)
    with pytest.raises(NoSourcesError):
        template.replace(question="Capital?", sources=[])
    with pytest.raises(InputTypeError, match="grammar must be a citeformer.GrammarOptions"):
        build_request("Q?", SOURCES, grammar={"max_group": 1})  # type: ignore[typeddict-item]


@pytest.mark.parametrize(
    ("policy", "options", "expected"),
    [
        ("quotes_only", {}, 2000),
        ("quotes_only", {"quotable_chars": 50}, 50),
        ("quotes_only", {"verbatim_quotes": False}, None),
        ("quotes_only", {"constrained": False}, None),
        ("required", {}, None),
        ("auto", {}, None),
    ],
)
def test_the_verbatim_quote_decision(
    policy: str, options: dict[str, object], expected: int | None
) -> None:
    assert build_request("Q?", SOURCES, policy, **options).quotable_chars == expected  # type: ignore[arg-type]


def test_grammar_text_spells_quotes_only_when_asked() -> None:
    request = build_request("Q?", ["the tower is tall"], "quotes_only")
    assert "quote-1" in request.grammar_text(spell_quotes=True)
    assert "quote-1" not in request.grammar_text(spell_quotes=False)
    assert '"[1]"' not in build_request("Q?", ["x"]).grammar_text(spell_quotes=True)


def test_terms_come_from_the_question_and_sources_of_a_required_answer() -> None:
    sources = ["Added in Python 3.8, e.g. the walrus.", "See str.join."]
    request = build_request("Since 3.8 or 3.10?", sources)
    assert request.terms == ("3.8", "3.10", "e.g", "str.join")
    grammar = request.grammar_text(spell_quotes=True)
    assert 'term ::= "3.8" | "3.10" | "e.g" | "str.join"' in grammar
    assert request.grammar_text(spell_quotes=False) == grammar
    for changed in (
        {"policy": "auto"}, {"constrained": False}, {"source_terms": False},
    ):
        assert build_request("Since 3.8?", sources, **changed).terms == ()  # type: ignore[arg-type]
    assert "term ::=" not in build_request("Q?", sources, source_terms=False).grammar_text(
        spell_quotes=True
    )


def test_messages_number_the_sources_as_the_markers_do() -> None:
    request = build_request("Capital?", [Source("Paris.", title="France"), "Berlin."])
    last = request.messages()[-1]["content"]
    assert "[1] France\nParis." in last and "[2]\nBerlin." in last
    assert last.endswith("Question: Capital?")


def test_replace_checks_the_changed_values_and_keeps_the_rest() -> None:
    request = build_request("Q?", SOURCES, "auto", max_new_tokens=8, evidence=None, max_group=2)
    changed = request.replace(max_new_tokens=16)
    assert isinstance(changed, GenerationRequest)
    assert (changed.max_new_tokens, changed.policy, changed.evidence) == (16, Policy.AUTO, None)
    assert changed.grammar.max_group == 2
    with pytest.raises(InvalidInputError, match="max_new_tokens"):
        request.replace(max_new_tokens=-1)


def test_request_is_frozen() -> None:
    request = build_request("Q?", SOURCES)
    with pytest.raises(AttributeError):
        request.question = "other"  # type: ignore[misc]


def test_history_turns_come_before_this_turn_without_their_markers() -> None:
    request = build_request(
        "When was it finished?", ["The tower was completed in 1889."],
        history=[("user", "Tell me about the Eiffel Tower."),
                 ("assistant", "It is a tower in Paris [2][3]. It is tall [1].")],
    )
    messages = request.messages()
    assert [m["role"] for m in messages[-3:]] == ["user", "assistant", "user"]
    assert messages[-2]["content"] == "It is a tower in Paris. It is tall."
    assert messages[-1]["content"].endswith("Question: When was it finished?")
    assert request.history[1][1].endswith("[1].")  # the request keeps what it was given


@pytest.mark.parametrize(
    ("history", "error", "message"),
    [
        ("user: hi", InputTypeError, "history must be a list of (role, text) pairs, got str"),
        ([("user",)], InputTypeError, "history[0] must be a (role, text) pair"),
        ([("system", "hi")], InvalidInputError, "history[0] has role 'system'"),
        ([("user", "hi"), ("assistant", " ")], InvalidInputError, "history[1] (assistant)"),
        ([("user", 3)], InvalidInputError, "history[0] (user) has no text"),
    ],
)
def test_bad_history_is_named(history: object, error: type, message: str) -> None:
    with pytest.raises(error) as raised:
        build_request("Q?", SOURCES, history=history)  # type: ignore[arg-type]
    assert message in str(raised.value)


@pytest.mark.parametrize(("arguments", "named"), [
    ({"question": "\udcff bees?"}, "the question"),
    ({"sources": ["Bees dance.", "Wasps \ud800 sting."]}, "source 2's text"),
    ({"sources": [Source("Bees dance.", title="bees\udcff.md")]}, "source 1's title"),
    ({"sources": [Source("Bees.", metadata={"path": ["a", "b\udc80"]})]},
     "source 1's metadata['path'][1]"),
    ({"history": [("user", "hi"), ("assistant", "\udcffhello")]}, "history[1] (assistant)"),
    ({"instructions": "Be brief.\udcff"}, "instructions"),
    ({"prompt": "\udcff"}, "prompt"),
])
def test_a_lone_surrogate_is_refused_naming_its_field(
    arguments: dict[str, object], named: str
) -> None:
    # A tokenizer refuses such text with a raw TypeError that names nothing.
    call = {"question": "What do bees do?", "sources": ["Bees dance."], **arguments}
    with pytest.raises(InvalidInputError) as raised:
        build_request(**call)  # type: ignore[arg-type]
    message = str(raised.value)
    assert message.startswith(f"{named} holds a lone surrogate (U+")
    assert "at character" in message and "errors='replace'" in message


def test_a_turn_of_markers_alone_is_refused() -> None:
    # It once reached the model as an empty message.
    with pytest.raises(InvalidInputError, match=r"history\[1\] \(assistant\) holds only citation"):
        build_request("q", ["s"], history=[("user", "hi"), ("assistant", " [1][2] ")])
    assert build_request("q", ["s"], history=[("user", "hi"), ("assistant", "Yes [1].")]).history
