"""citeformer.integration: what both framework wrappers share, tested without either framework."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

from citeformer import EmptySourceError, GrammarOptions, InputTypeError, InvalidInputError, Policy
from citeformer.integration import (
    GRAMMAR_SETTING,
    call_request,
    grammar_of,
    history_turn,
    keep_with_text,
    setting_names,
    settings_template,
    short,
    unknown_names_message,
)
from citeformer.request import option_names

SOURCES = ["Paris is the capital of France.", "Berlin is the capital of Germany."]


def test_the_settings_are_the_request_options_but_the_per_call_ones() -> None:
    names = setting_names()
    assert names[0] == "policy" and GRAMMAR_SETTING in names
    assert "history" not in names and "prompt" not in names
    request_options = set(option_names()) - set(GrammarOptions.names())
    assert set(names) - {"policy", GRAMMAR_SETTING} == request_options - {
        "history", "prompt", "grammar"
    }


def test_a_template_is_checked_once_and_each_call_fills_it() -> None:
    template = settings_template({"policy": "auto", "max_new_tokens": 12,
                                  GRAMMAR_SETTING: {"max_group": 1}})
    request = call_request(template, "Capital?", SOURCES, temperature=0.5)
    assert (request.policy, request.max_new_tokens, request.grammar.max_group) == (
        Policy.AUTO, 12, 1
    )
    assert request.temperature == 0.5 and request.n_sources == 2
    # A call's grammar options replace the settings' as a whole.
    replaced = call_request(template, "Capital?", SOURCES, **{GRAMMAR_SETTING: {"max_group": 2}})
    assert replaced.grammar == GrammarOptions(max_group=2)
    with pytest.raises(InvalidInputError, match="max_new_tokens must be an int from 1"):
        settings_template({"max_new_tokens": 0})
    with pytest.raises(InputTypeError, match="history belong to one call"):
        settings_template({"history": []})
    with pytest.raises(InputTypeError, match="got both grammar_options= and grammar="):
        settings_template({GRAMMAR_SETTING: {}, "grammar": GrammarOptions()})


def test_grammar_options_come_as_a_mapping_options_or_none() -> None:
    assert grammar_of(None) == GrammarOptions()
    assert grammar_of({"max_group": 2}) == GrammarOptions(max_group=2)
    options = GrammarOptions(max_sentence_words=9)
    assert grammar_of(options) is options
    with pytest.raises(InputTypeError, match="grammar_options must be a dict"):
        grammar_of([("max_group", 2)])


def test_blank_sources_are_dropped_with_a_warning_or_refused(
    caplog: pytest.LogCaptureFixture,
) -> None:
    items = ["a passage", "  ", "another"]
    logger = logging.getLogger("citeformer.test")
    options = {"noun": "document", "field": "page_content", "label": lambda _: "untitled",
               "origin": " from input['context']", "logger": logger}
    with caplog.at_level("WARNING", logger="citeformer.test"):
        kept = keep_with_text(items, str, "drop", **options)  # type: ignore[arg-type]
    assert kept == ["a passage", "another"]
    assert "document 2 of 3 (untitled) from input['context']" in caplog.text
    with pytest.raises(EmptySourceError, match="document 2 of 3 .untitled. from input"):
        keep_with_text(items, str, "raise", **options)  # type: ignore[arg-type]


@pytest.mark.parametrize(("role", "core"), [
    ("user", "user"), ("Human", "user"), ("assistant", "assistant"), ("AI", "assistant"),
    ("chatbot", "assistant"), ("model", "assistant"),
])
def test_history_roles_become_the_cores(role: str, core: str) -> None:
    assert history_turn(role, "Hello", "history[0]") == (core, "Hello")


def test_a_system_turn_points_to_instructions() -> None:
    with pytest.raises(InvalidInputError, match="instructions= to the runnable"):
        history_turn("system", "Be brief", "history[1]", instructions_to="runnable")
    with pytest.raises(InvalidInputError, match="history.2."):
        history_turn("tool", "x", "history[2]")


def test_messages_show_values_short_and_suggest_names() -> None:
    assert short("x" * 100).endswith("...") and len(short("x" * 100)) == 60
    assert short(3) == "3"
    message = unknown_names_message("CitationRunnable", ["max_new_token"], ["max_new_tokens",
                                                                             "seed"])
    assert "'max_new_token' (did you mean 'max_new_tokens'?)" in message
    assert message.startswith("CitationRunnable has no field")


def test_importing_it_imports_no_framework_and_no_torch() -> None:
    code = ("import sys, citeformer.integration; "
            "print([m for m in sys.modules if m.split('.')[0] in "
            "('langchain_core', 'llama_index', 'torch', 'httpx')])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "[]", done.stdout
