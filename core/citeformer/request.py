"""One validated generation request: what every generator, wrapper and the CLI hand on.

``build_request`` checks a call's arguments once and returns a frozen ``GenerationRequest``;
``CiteGenerator``, ``ServerGenerator``, both framework wrappers and the command line pass that
object on instead of re-checking and re-spelling a dozen keyword arguments at every layer.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict

from citeformer.errors import (
    EmptyQuestionError,
    EmptySourceError,
    InputTypeError,
    InvalidInputError,
    NoSourcesError,
)
from citeformer.evidence import DEFAULT_EVIDENCE, Evidence, resolve_evidence
from citeformer.grammar import GrammarOptions, dotted_terms, render_grammar
from citeformer.prompt import build_messages
from citeformer.readability import OFF, Readability
from citeformer.types import Policy, Source

if TYPE_CHECKING:
    from typing_extensions import Unpack

SourceLike = Source | str

DEFAULT_POLICY = Policy.REQUIRED
GENERATOR_DEFAULT = "default"
"""``evidence=GENERATOR_DEFAULT``: the generator's own default (lexical locally, none on a
serving engine), exactly as if ``evidence`` were not given; what the wrappers pass by default."""
DEFAULT_MAX_NEW_TOKENS = 160
MAX_SEED = 2**63 - 1
"""Largest seed accepted: torch and every serving engine take a signed 64-bit seed."""


class GenerationOptions(TypedDict, total=False):
    """The keyword options of ``generate``/``stream`` (and their async twins), all optional.

    Grammar options (``max_group``, ``max_sentence_words``, ...) are accepted beside these as
    keywords of their own; see ``citeformer.build_grammar``.
    """

    max_new_tokens: int
    """Most tokens to generate (default 160)."""
    do_sample: bool
    """Sample instead of decoding greedily (default ``False``)."""
    temperature: float
    """Sampling temperature, > 0 and finite; used when ``do_sample`` (default 1.0)."""
    seed: int | None
    """Seed for sampling, 0..2**63-1, for reproducible samples."""
    instructions: str | None
    """System instructions replacing the policy's default ones."""
    history: Sequence[tuple[str, str]]
    """Earlier turns of a conversation, ``(role, text)`` with role ``"user"`` or
    ``"assistant"``, shown before this turn's sources and question (markers stripped)."""
    prompt: str | None
    """A whole prompt you rendered yourself (it must number the sources as the markers do)."""
    constrained: bool
    """``False`` drops the grammar, for comparisons only (default ``True``)."""
    evidence: Evidence | str | None
    """How a marker's id is chosen among the valid ones: ``"lexical"`` (local default),
    ``"embedding"``, an ``Evidence``, or ``None`` (the model alone). Local generation only."""
    readability: Readability | None
    """How the prose around the markers is steered (``citeformer.readability``); ``None`` turns
    every readability processor off. Local generation only."""
    max_group: int
    max_sentence_words: int
    max_word_chars: int
    max_quote_chars: int
    min_quote_chars: int
    quotable_chars: int
    verbatim_quotes: bool
    cite_after_punctuation: bool
    sentence_ends: str
    source_terms: bool


@dataclass(frozen=True)
class GenerationRequest:
    """Everything one answer depends on, checked. Build it with ``build_request``."""

    question: str
    """The question, a non-blank string."""

    sources: tuple[Source, ...]
    """The numbered sources: marker ``[k]`` cites ``sources[k - 1]``."""

    policy: Policy = DEFAULT_POLICY
    """Where the grammar requires markers."""

    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    """Most tokens to generate."""

    do_sample: bool = False
    """Sample (at ``temperature``) instead of greedy decoding."""

    temperature: float = 1.0
    """Sampling temperature, finite and > 0."""

    seed: int | None = None
    """Seed of the sampler, or ``None``."""

    instructions: str | None = None
    """System instructions replacing the policy's default ones."""

    history: tuple[tuple[str, str], ...] = ()
    """Earlier turns of the conversation, ``(role, text)``; markers are stripped when shown."""

    prompt: str | None = None
    """A prompt rendered by the caller, used instead of the built-in chat messages."""

    constrained: bool = True
    """Whether the citation grammar is enforced."""

    grammar: GrammarOptions = field(default_factory=GrammarOptions)
    """Options of the citation grammar."""

    evidence: Evidence | None = None
    """The scorer that picks among valid ids, or ``None``."""

    evidence_by_default: bool = True
    """Whether ``evidence`` is the library's default rather than the caller's choice (a serving
    engine, which has no logits to reweight, refuses only an explicit one)."""

    readability: Readability = field(default_factory=Readability)
    """The readability processors' settings (local generation only)."""

    @property
    def n_sources(self) -> int:
        """N: markers ``[1]``..``[N]`` are the only ones the grammar allows."""
        return len(self.sources)

    @property
    def quotable_chars(self) -> int | None:
        """How much of each source a verbatim quote may come from, or ``None``.

        ``None`` when quotes are not checked: not ``QUOTES_ONLY``, unconstrained, or
        ``verbatim_quotes=False``. This is the one place that decides it.
        """
        if self.constrained and self.policy is Policy.QUOTES_ONLY and self.grammar.verbatim_quotes:
            return self.grammar.quotable_chars
        return None

    @property
    def terms(self) -> tuple[str, ...]:
        """The dotted terms (``3.8``, ``str.join``) a word of the answer may copy, or ``()``.

        Found in the question and the sources (``citeformer.grammar.dotted_terms``); ``()``
        unless the answer is constrained, ``REQUIRED`` and ``source_terms`` is on.
        """
        if not (
            self.constrained and self.policy is Policy.REQUIRED and self.grammar.source_terms
        ):
            return ()
        return dotted_terms(
            [self.question, *(source.text for source in self.sources)],
            max_chars=self.grammar.max_word_chars,
        )

    def messages(self) -> list[dict[str, str]]:
        """The chat messages the model is shown (unless ``prompt`` replaces them)."""
        return build_messages(
            self.question, self.sources, self.policy, self.instructions, self.history
        )

    def grammar_text(self, *, spell_quotes: bool) -> str:
        """The GBNF grammar of this request.

        ``spell_quotes``: write the verbatim quotes of each source out as grammar rules (for a
        serving engine); local generation enforces them with ``QuoteGuard`` instead.
        """
        quote_sources = self.sources if spell_quotes and self.quotable_chars is not None else None
        return render_grammar(
            self.n_sources, self.policy, self.grammar, quote_sources, self.terms
        )

    def replace(self, **changes: Any) -> GenerationRequest:
        """A copy with some fields changed; the changed values are checked again."""
        values: dict[str, Any] = {
            "max_new_tokens": self.max_new_tokens, "do_sample": self.do_sample,
            "temperature": self.temperature, "seed": self.seed,
            "instructions": self.instructions, "prompt": self.prompt, "history": self.history,
            "constrained": self.constrained,
        }
        if "evidence" not in changes and not self.evidence_by_default:
            values["evidence"] = self.evidence
        values["readability"] = self.readability
        grammar = {**self.grammar.as_dict(), **_pop_grammar(changes)}
        question = changes.pop("question", self.question)
        sources = changes.pop("sources", self.sources)
        policy = changes.pop("policy", self.policy)
        return build_request(question, sources, policy, **{**values, **changes}, **grammar)


def build_request(
    question: str,
    sources: Sequence[SourceLike],
    policy: Policy | str = DEFAULT_POLICY,
    **options: Unpack[GenerationOptions],
) -> GenerationRequest:
    """Check one call's arguments and return the request every generator takes.

    Raises an ``InvalidInputError`` (a ``ValueError``; ``InputTypeError`` is also a
    ``TypeError``) that names the bad value and what to do about it.
    """
    opts: dict[str, Any] = dict(options)
    grammar = GrammarOptions.of(_pop_grammar(opts))
    max_new_tokens = opts.pop("max_new_tokens", DEFAULT_MAX_NEW_TOKENS)
    do_sample = opts.pop("do_sample", False)
    temperature = opts.pop("temperature", 1.0)
    seed = opts.pop("seed", None)
    instructions = opts.pop("instructions", None)
    history = opts.pop("history", ())
    prompt = opts.pop("prompt", None)
    constrained = opts.pop("constrained", True)
    evidence_given = opts.get("evidence", GENERATOR_DEFAULT) != GENERATOR_DEFAULT
    evidence = opts.pop("evidence", GENERATOR_DEFAULT)
    if evidence == GENERATOR_DEFAULT:
        evidence = DEFAULT_EVIDENCE
    readability = opts.pop("readability", Readability())
    if opts:
        raise InputTypeError(
            f"unknown option(s) {sorted(opts)}; generation options are "
            f"{', '.join(_DECODING_NAMES)} and the grammar options "
            f"{', '.join(GrammarOptions.names())}"
        )
    return GenerationRequest(
        question=check_question(question),
        sources=normalize_sources(sources),
        policy=Policy.coerce(policy),
        max_new_tokens=_check_max_new_tokens(max_new_tokens),
        do_sample=_check_bool("do_sample", do_sample),
        temperature=_check_temperature(temperature),
        seed=_check_seed(seed),
        instructions=_check_text("instructions", instructions),
        history=check_history(history),
        prompt=_check_text("prompt", prompt),
        constrained=_check_bool("constrained", constrained),
        grammar=grammar,
        evidence=resolve_evidence(evidence),
        evidence_by_default=not evidence_given,
        readability=_check_readability(readability),
    )


def normalize_sources(sources: Sequence[SourceLike]) -> tuple[Source, ...]:
    """Turn a list of ``Source`` or strings into Sources, rejecting what cannot be cited."""
    if isinstance(sources, (str, Source)) or not isinstance(sources, Sequence):
        raise InputTypeError(
            f"sources must be a list of Source or str, got {type(sources).__name__}; "
            "wrap a single passage in a list"
        )
    if not sources:
        raise NoSourcesError(
            "no sources were given, so there is nothing to cite; retrieve at least one passage"
        )
    normalized = []
    for position, item in enumerate(sources, start=1):
        source = Source(item) if isinstance(item, str) else item
        if not isinstance(source, Source):
            raise InputTypeError(
                f"source {position} is a {type(item).__name__}; pass Source objects or strings"
            )
        if not isinstance(source.text, str) or not source.text.strip():
            raise EmptySourceError(
                f"source {position} ({source.title or 'untitled'}) has empty text; "
                "drop it before calling, since a marker pointing at it could support nothing"
            )
        normalized.append(source)
    return tuple(normalized)


def check_question(question: object) -> str:
    """The question, if it is a non-blank string."""
    if not isinstance(question, str):
        raise EmptyQuestionError(f"the question must be a string, got {type(question).__name__}")
    if not question.strip():
        raise EmptyQuestionError(f"the question is empty ({question!r}); ask something")
    return question


_DECODING_NAMES = (
    "max_new_tokens", "do_sample", "temperature", "seed", "instructions", "history", "prompt",
    "constrained", "evidence", "readability",
)


def _pop_grammar(options: dict[str, Any]) -> dict[str, Any]:
    return {name: options.pop(name) for name in GrammarOptions.names() if name in options}


def _check_max_new_tokens(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInputError(f"max_new_tokens must be a positive int, got {value!r}")
    return value


def _check_bool(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise InputTypeError(f"{name} must be True or False, got {value!r}")
    return value


def _check_temperature(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputTypeError(
            f"temperature must be a number, got {type(value).__name__} {value!r}"
        )
    if not (math.isfinite(value) and value > 0):
        raise InvalidInputError(
            f"temperature must be a finite number > 0, got {value!r}; use do_sample=False "
            "for greedy decoding"
        )
    return float(value)


def _check_seed(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputTypeError(f"seed must be an int or None, got {type(value).__name__} {value!r}")
    if not 0 <= value <= MAX_SEED:
        raise InvalidInputError(f"seed must be between 0 and 2**63-1, got {value!r}")
    return value


ROLES = ("user", "assistant")


def check_history(history: object) -> tuple[tuple[str, str], ...]:
    """Earlier turns as ``(role, text)`` pairs: roles ``"user"``/``"assistant"``, no blank text."""
    if isinstance(history, (str, bytes, Mapping)) or not isinstance(history, Sequence):
        raise InputTypeError(
            f"history must be a list of (role, text) pairs, got {type(history).__name__}"
        )
    turns = []
    for index, turn in enumerate(history):
        if isinstance(turn, (str, bytes)) or not isinstance(turn, Sequence) or len(turn) != 2:
            raise InputTypeError(
                f"history[{index}] must be a (role, text) pair, got {turn!r:.60}"
            )
        role, text = turn
        if role not in ROLES:
            raise InvalidInputError(
                f"history[{index}] has role {role!r}; use 'user' or 'assistant'"
            )
        if not isinstance(text, str) or not text.strip():
            raise InvalidInputError(
                f"history[{index}] ({role}) has no text ({text!r:.40}); drop empty turns"
            )
        turns.append((role, text))
    return tuple(turns)


def _check_readability(value: object) -> Readability:
    if value is None:
        return OFF
    if not isinstance(value, Readability):
        raise InputTypeError(
            f"readability must be a citeformer.readability.Readability or None, got "
            f"{type(value).__name__}"
        )
    return value


def _check_text(name: str, value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise InputTypeError(f"{name} must be a string or None, got {type(value).__name__}")
    if not value.strip():
        raise InvalidInputError(
            f"{name} is empty ({value!r}); pass None to use the built-in {name}"
        )
    return value


def options_of(values: Mapping[str, Any]) -> dict[str, Any]:
    """The generation and grammar options among ``values`` (the others are left out)."""
    names = (*_DECODING_NAMES, *GrammarOptions.names())
    return {name: values[name] for name in names if name in values}


__all__ = [
    "DEFAULT_MAX_NEW_TOKENS",
    "DEFAULT_POLICY",
    "GenerationOptions",
    "GenerationRequest",
    "SourceLike",
    "build_request",
    "check_question",
    "normalize_sources",
    "options_of",
]
