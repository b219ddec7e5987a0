"""CitationSettings: the runnable's option fields are the core's schema, checked once into a
request template, and each call's request is made from it; offline."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from pydantic import ValidationError

from citeformer.errors import InputTypeError
from citeformer.grammar import GrammarOptions
from citeformer.integration import setting_names
from citeformer.readability import OFF, Readability
from citeformer.request import GENERATOR_DEFAULT, GenerationRequest, request_template
from citeformer.testing import FakeGenerator
from citeformer_langchain import CitationRunnable
from citeformer_langchain.models import GeneratorStep
from citeformer_langchain.settings import CitationSettings, call_option_names
from tests.langchain.common import ask, best_source

OWN_FIELDS = ("title_keys", "empty_sources")
"""The settings that are not generation options: how documents become sources."""


def option_fields() -> list[str]:
    return [name for name in CitationSettings.model_fields
            if name not in GeneratorStep.model_fields and name not in OWN_FIELDS]


def test_the_option_fields_are_the_cores_schema() -> None:
    # LangChain needs declared fields (configurable_fields, the JSON schema): they must be the
    # request's options, in its order, and nothing else.
    assert option_fields() == list(setting_names())
    assert set(call_option_names()) == {*setting_names(), *GrammarOptions.names()}


def test_each_default_is_the_cores() -> None:
    runnable = CitationRunnable(generator=FakeGenerator())
    core = request_template()
    for name in setting_names():
        value = getattr(runnable, name)
        if name == "grammar_options":
            assert GrammarOptions.of(value) == core.grammar
        elif name == "evidence":
            assert value == "default" and core.evidence is GENERATOR_DEFAULT
        elif name == "policy":
            assert value == core.policy.value
        else:
            assert value == getattr(core, name), name


def test_the_settings_are_checked_once_and_each_call_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made: list[GenerationRequest] = []
    check = GenerationRequest.__post_init__

    def counted(self: GenerationRequest) -> None:
        check(self)
        made.append(self)

    monkeypatch.setattr(GenerationRequest, "__post_init__", counted)
    fake = FakeGenerator(best_source)
    cite = CitationRunnable(generator=fake, max_new_tokens=30, grammar_options={"max_group": 2})
    assert len(made) == 1  # the template
    cite.invoke(ask("Spain?"))
    list(cite.stream(ask("Spain?")))
    cite.invoke(ask("Spain?"), max_new_tokens=12)
    assert len(made) == 4  # one request per call, the call's options included
    assert made[1:] == fake.requests


def test_a_grammar_option_may_be_changed_by_its_name_per_call() -> None:
    fake = FakeGenerator(best_source)
    cite = CitationRunnable(generator=fake, grammar_options={"max_group": 2})
    cite.invoke(ask("Spain?"), max_sentence_words=9)
    assert fake.requests[-1].grammar == GrammarOptions(max_group=2, max_sentence_words=9)
    # grammar_options as a whole replaces the field's, as a field would.
    cite.invoke(ask("Spain?"), grammar_options={"max_sentence_words": 9})
    assert fake.requests[-1].grammar == GrammarOptions(max_sentence_words=9)


def test_every_option_of_the_schema_reaches_the_request() -> None:
    fake = FakeGenerator(best_source)
    steady = Readability(end_intent=False)
    CitationRunnable(generator=fake, readability=steady, constrained=False).invoke(ask("Spain?"))
    assert fake.requests[-1].readability == steady and fake.requests[-1].constrained is False
    CitationRunnable(generator=fake, readability=None).invoke(ask("Spain?"))
    assert fake.requests[-1].readability == OFF


@pytest.mark.parametrize(
    ("fields", "named"),
    [({"readability": "calm"}, "readability"), ({"grammar_options": {"max_words": 3}},
                                                 "unknown grammar option"),
     ({"temperature": 0.0}, "temperature must be a finite number >= 0.01")],
)
def test_a_bad_setting_is_refused_at_construction(fields: dict[str, Any], named: str) -> None:
    with pytest.raises(ValidationError, match=named):
        CitationRunnable(generator=FakeGenerator(), **fields)


@pytest.mark.parametrize("name", ["history", "prompt"])
def test_the_options_of_one_call_are_not_settings(name: str) -> None:
    with pytest.raises(InputTypeError, match=f"no field '{name}'"):
        CitationRunnable(generator=FakeGenerator(), **{name: "x"})
    with pytest.raises(InputTypeError, match="unknown generation option"):
        CitationRunnable(generator=FakeGenerator()).invoke(ask("Spain?"), **{name: "x"})


def test_a_copy_with_other_fields_has_its_own_template() -> None:
    fake = FakeGenerator(best_source)
    cite = CitationRunnable(generator=fake, max_new_tokens=30)
    copy = type(cite)(**{**dict(cite), "max_new_tokens": 8})
    copy.invoke(ask("Spain?"))
    cite.invoke(ask("Spain?"))
    assert [r.max_new_tokens for r in fake.requests] == [8, 30]
    assert dataclasses.replace(fake.requests[0], max_new_tokens=30) == fake.requests[1]
