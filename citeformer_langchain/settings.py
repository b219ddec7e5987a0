"""The settings of a ``CitationRunnable``: its generation options, checked once into a request
template, and how its input's documents become sources."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_core.documents import Document
from pydantic import Field, PrivateAttr, field_validator, model_validator
from pydantic.json_schema import SkipJsonSchema
from typing_extensions import Self

from citeformer.errors import InputTypeError
from citeformer.evidence import Evidence
from citeformer.evidence.refusal import Refusal
from citeformer.grammar import GrammarOptions
from citeformer.integration import EmptySources, setting_names, settings_template
from citeformer.readability import Readability
from citeformer.request import (
    DEFAULT_MAX_NEW_TOKENS,
    DEFAULT_POLICY,
    GENERATOR_DEFAULT,
    GenerationRequest,
)
from citeformer.types import TITLE_KEYS
from citeformer_langchain.answer import CitationAnswer
from citeformer_langchain.inputs import to_request
from citeformer_langchain.models import GeneratorStep

__all__ = ["CitationSettings", "call_option_names"]


def call_option_names() -> tuple[str, ...]:
    """What ``invoke``/``stream``/``batch`` (and ``bind``) take as per-call options: the
    settings (``citeformer.integration.setting_names``), and each grammar option by its name."""
    return (*setting_names(), *GrammarOptions.names())


class CitationSettings(GeneratorStep[dict[str, Any], CitationAnswer]):
    """The generation options of a ``CitationRunnable``, and how documents become sources.

    The option fields are ``citeformer.integration.setting_names()``, each defaulting to the
    core's value; they are checked once, when the runnable is made, into the request template
    every call's request is made from (a bad value raises a ``ValidationError`` naming it). A
    call may change any of them, or a grammar option by its name, as a keyword of ``invoke``,
    ``stream``, ``batch`` or ``bind``; that call's request checks them.

    Documents become citeformer Sources in order. A source's title is the first non-blank of the
    document's metadata ``title_keys`` (``title``, then ``file_name``, then ``source``).

    A document whose ``page_content`` is blank is left out, with a logged warning
    (``empty_sources="drop"``), so that it never gets a number. The answer's ``documents`` are
    the documents the model saw, and ``[N]`` is always ``answer.documents[N - 1]``: once a blank
    document was left out, that is not the N-th document of the input. If no document is left,
    ``NoSourcesError``. With ``empty_sources="raise"``, a blank document raises
    ``EmptySourceError`` naming it.
    """

    policy: str = DEFAULT_POLICY.value
    """Where markers are required: ``"required"`` (every sentence), ``"quotes_only"`` or
    ``"auto"``; see ``citeformer.Policy``."""

    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    """Most tokens to generate per answer."""

    # The request's own defaults, so that the runnable and the core cannot drift apart.
    do_sample: bool = GenerationRequest.do_sample
    """Sample instead of greedy decoding."""

    temperature: float = GenerationRequest.temperature
    """Sampling temperature, used when ``do_sample``."""

    seed: int | None = None
    """Seed for sampling, for reproducible samples."""

    instructions: str | None = None
    """System instructions replacing the policy's default ones."""

    constrained: bool = GenerationRequest.constrained
    """Whether the citation grammar is enforced; ``False`` is for comparisons only."""

    grammar_options: dict[str, int | bool | str] = Field(default_factory=dict)
    """Options of ``citeformer.build_grammar``, e.g. ``{"max_sentence_words": 16}``; those left
    out keep the core's defaults."""

    evidence: SkipJsonSchema[Evidence] | str | None = "default"
    """How a marker's id is chosen among the valid ones: ``"lexical"``, ``"embedding"``, a
    ``citeformer.evidence.Evidence`` or ``None`` (the model alone); see the README. ``"default"``
    leaves it to the generator: ``"lexical"`` in this process, none on a server (a server
    refuses any other value)."""

    readability: SkipJsonSchema[Readability | None] = Field(default_factory=Readability)
    """How the prose around the markers is steered (``citeformer.readability``); ``None`` turns
    every readability lever off."""

    refusal: SkipJsonSchema[Refusal | None] = Field(default_factory=Refusal)
    """When the answer is the refusal sentence because the documents do not answer the question
    (``citeformer.evidence.refusal.Refusal``; the answer's ``abstained`` says so); ``None``:
    every question is answered with citations."""

    title_keys: tuple[str, ...] = TITLE_KEYS
    """Metadata keys a source's title (shown to the model) is read from: the first non-blank."""

    empty_sources: EmptySources = "drop"
    """A document with a blank ``page_content``: ``"drop"`` leaves it out (logged), ``"raise"``
    raises ``EmptySourceError``."""

    _template: GenerationRequest = PrivateAttr()

    @field_validator("evidence", mode="before")
    @classmethod
    def _name_the_default(cls, value: object) -> object:
        # A copy of the runnable (configurable_fields) passes the core's sentinel on.
        return "default" if value is GENERATOR_DEFAULT else value

    @model_validator(mode="after")
    def _check_settings(self) -> Self:
        self._template = settings_template({name: getattr(self, name) for name in setting_names()})
        self.policy = self._template.policy.value
        return self

    def _call_options(self, overrides: Mapping[str, Any]) -> dict[str, Any]:
        """One call's options, their names checked here and their values by its request."""
        unknown = sorted(set(overrides) - set(call_option_names()))
        if unknown:
            raise InputTypeError(
                f"unknown generation option(s) {unknown}; {type(self).__name__} takes "
                f"{list(call_option_names())}"
            )
        return dict(overrides)

    def _request(
        self, input: Any, options: Mapping[str, Any]
    ) -> tuple[GenerationRequest, list[Document]]:
        """The request of one input, and the documents its sources are."""
        return to_request(
            input, self._template, options,
            title_keys=self.title_keys, empty_sources=self.empty_sources,
        )
