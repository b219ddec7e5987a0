"""One validated generation request: the value every generator answers.

``GenerationRequest`` is the one list of generation options: its fields. It checks every field
when it is made (``build_request``, ``GenerationRequest(...)``, ``replace``), so ``CiteGenerator``,
``ServerGenerator``, both framework wrappers and the command line hand one frozen object on
instead of re-checking and re-spelling a dozen keyword arguments at every layer. A wrapper checks
its settings once, into a template (``request_template``), and replaces the question and
sources per call.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from functools import cached_property
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, TypedDict

from citeformer.errors import (
    InputTypeError,
    InvalidInputError,
    check_float,
    check_int,
    shown,
)
from citeformer.evidence.refusal import Band, Refusal, RequestWeighing
from citeformer.evidence.scoring import DEFAULT_EVIDENCE, Evidence, resolve_evidence
from citeformer.generation.inputs import (
    SourceLike,
    check_encodable,
    check_history,
    check_question,
    normalize_sources,
)
from citeformer.grammar.rules import (
    GrammarOptions,
    check_marker_slots,
    dotted_terms,
    render_grammar,
)
from citeformer.prompt import build_messages, default_instructions
from citeformer.readability import OFF, Readability
from citeformer.types import CitedAnswer, Policy, RefusalCheck, Source

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_MAX_NEW_TOKENS",
    "DEFAULT_POLICY",
    "GENERATOR_DEFAULT",
    "MAX_NEW_TOKENS",
    "MAX_SEED",
    "MAX_TEMPERATURE",
    "MIN_TEMPERATURE",
    "GenerationOptions",
    "GenerationRequest",
    "OPTION",
    "GeneratorDefault",
    "SourceLike",
    "build_request",
    "check_encodable",
    "check_history",
    "check_question",
    "normalize_sources",
    "option_names",
    "request_option_names",
    "request_template",
]

DEFAULT_POLICY = Policy.REQUIRED
DEFAULT_MAX_NEW_TOKENS = 160
DEFAULT_BATCH_SIZE = 8
"""Rows decoded together by ``answer_batch`` and the wrappers' ``batch`` with a local model."""
MAX_NEW_TOKENS = 2**31 - 1
"""Largest ``max_new_tokens``: more than any model's context, and a count every engine takes."""
MIN_TEMPERATURE = 0.01
MAX_TEMPERATURE = 100.0
"""Sampling temperatures accepted (``MIN_TEMPERATURE`` to this). Logits are divided by it: a
smaller one overflows them to ``inf`` sooner (vLLM raises any temperature below 0.01 to 0.01 for
that reason); above 100 every allowed token is about equally likely."""
MAX_SEED = 2**63 - 1
"""Largest seed accepted: torch and every serving engine take a signed 64-bit seed."""


class GeneratorDefault:
    """The type of ``GENERATOR_DEFAULT``: one object, shown by its name."""

    _instance: GeneratorDefault | None = None

    def __new__(cls) -> GeneratorDefault:  # noqa: D102 - one instance, GENERATOR_DEFAULT
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "GENERATOR_DEFAULT"

    def __reduce__(self) -> str:
        return "GENERATOR_DEFAULT"


GENERATOR_DEFAULT: Final = GeneratorDefault()
"""``evidence=GENERATOR_DEFAULT`` (the default): the generator's own choice, lexical evidence
wherever citeformer steers the logits (in process, and on a serving engine that runs its steering
processor), none where it cannot. ``"default"`` means the same."""

OPTION: Final[Mapping[str, bool]] = MappingProxyType({"option": True})
"""The metadata of a ``GenerationRequest`` field that is a generation option: the options are
the fields so marked, whatever their order."""

# The placeholder a template is checked with; ``GenerationRequest.replace`` puts the real ones in.
_TEMPLATE_QUESTION = "?"
_TEMPLATE_SOURCES = (Source("?"),)


@dataclass(frozen=True)
class GenerationRequest:
    """Everything one answer depends on, checked when made. Build it with ``build_request``.

    The fields marked ``OPTION`` (all after ``policy``) are the generation options, as keywords
    of ``build_request``, ``generate`` and ``stream``; a grammar option (``max_group``, ...) may
    be given there by its own name instead of through ``grammar``.
    """

    question: str
    """The question, a non-blank string."""

    sources: tuple[Source, ...]
    """The numbered sources: marker ``[k]`` cites ``sources[k - 1]``."""

    policy: Policy = DEFAULT_POLICY
    """Where the grammar requires markers."""

    max_new_tokens: int = field(default=DEFAULT_MAX_NEW_TOKENS, metadata=OPTION)
    """Most tokens to generate, 1 to ``MAX_NEW_TOKENS`` (2**31-1)."""

    do_sample: bool = field(default=False, metadata=OPTION)
    """Sample (at ``temperature``) instead of greedy decoding."""

    temperature: float = field(default=1.0, metadata=OPTION)
    """Sampling temperature, 0.01 to 100 (``MIN_TEMPERATURE``, ``MAX_TEMPERATURE``); used when
    ``do_sample``."""

    seed: int | None = field(default=None, metadata=OPTION)
    """Seed of the sampler (0..2**63-1), for reproducible samples, or ``None``."""

    instructions: str | None = field(default=None, metadata=OPTION)
    """System instructions replacing the policy's default ones."""

    history: tuple[tuple[str, str], ...] = field(default=(), metadata=OPTION)
    """Earlier turns of the conversation, ``(role, text)`` with role ``"user"`` or
    ``"assistant"``, shown before this turn's sources and question (markers stripped)."""

    prompt: str | None = field(default=None, metadata=OPTION)
    """A whole prompt rendered by the caller, used instead of the built-in chat messages (it
    must number the sources as the markers do)."""

    constrained: bool = field(default=True, metadata=OPTION)
    """Whether the citation grammar is enforced; ``False`` is for comparisons only."""

    grammar: GrammarOptions = field(default_factory=GrammarOptions, metadata=OPTION)
    """Options of the citation grammar."""

    evidence: Evidence | GeneratorDefault | None = field(default=GENERATOR_DEFAULT, metadata=OPTION)
    """How a marker's id is chosen among the valid ones: an ``Evidence`` (or its name,
    ``"lexical"``, ``"embedding"``), ``None`` (the model alone), or ``GENERATOR_DEFAULT``."""

    readability: Readability = field(default_factory=Readability, metadata=OPTION)
    """How the prose around the markers is steered (``citeformer.readability``); ``None``
    turns every readability lever off."""

    refusal: Refusal | None = field(default_factory=Refusal, metadata=OPTION)
    """When the answer is the refusal sentence because the sources do not answer the question
    (``citeformer.evidence.refusal``); ``None``: never, every answer is generated."""

    def __post_init__(self) -> None:
        # Checked in field order, so the first bad field is the one named.
        set_ = object.__setattr__
        set_(self, "question", check_question(self.question))
        set_(self, "sources", normalize_sources(self.sources))
        set_(self, "policy", Policy.coerce(self.policy))
        check_int("max_new_tokens", self.max_new_tokens, 1, MAX_NEW_TOKENS)
        _check_bool("do_sample", self.do_sample)
        set_(self, "temperature", _check_temperature(self.temperature))
        _check_seed(self.seed)
        _check_text("instructions", self.instructions)
        set_(self, "history", check_history(self.history))
        _check_text("prompt", self.prompt)
        _check_bool("constrained", self.constrained)
        if not isinstance(self.grammar, GrammarOptions):
            raise InputTypeError(
                f"grammar must be a citeformer.GrammarOptions, got {type(self.grammar).__name__};"
                " or pass its options (max_group=...) as keywords of their own"
            )
        if self.constrained:
            check_marker_slots(len(self.sources), self.grammar.max_group)
        evidence = self.evidence
        if isinstance(evidence, str) and evidence.strip().lower() == "default":
            evidence = GENERATOR_DEFAULT
        if evidence is not GENERATOR_DEFAULT:
            evidence = resolve_evidence(evidence)
        set_(self, "evidence", evidence)
        set_(self, "readability", _check_readability(self.readability))
        if self.refusal is not None and not isinstance(self.refusal, Refusal):
            raise InputTypeError(
                f"refusal must be a citeformer.evidence.refusal.Refusal or None, got "
                f"{type(self.refusal).__name__}"
            )

    @property
    def n_sources(self) -> int:
        """N: markers ``[1]``..``[N]`` are the only ones the grammar allows."""
        return len(self.sources)

    def evidence_or(self, default: Evidence | None) -> Evidence | None:
        """The evidence to use: this request's, or ``default`` if it leaves the choice open."""
        if isinstance(self.evidence, GeneratorDefault):
            return default
        return self.evidence

    @property
    def default_evidence(self) -> Evidence | None:
        """``evidence_or`` citeformer's default scorer: what a generator that steers uses."""
        return self.evidence_or(resolve_evidence(DEFAULT_EVIDENCE))

    @property
    def quotable_chars(self) -> int | None:
        """How much of each source a verbatim quote may come from, or ``None``.

        ``None`` when quotes are not checked: not ``QUOTES_ONLY``, unconstrained, or
        ``verbatim_quotes=False``. This is the one place that decides it.
        """
        if self.constrained and self.policy is Policy.QUOTES_ONLY and self.grammar.verbatim_quotes:
            return self.grammar.quotable_chars
        return None

    @cached_property
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

    @cached_property
    def weighing(self) -> RequestWeighing:
        """What ``refusal`` makes of this request (``citeformer.evidence.refusal``).

        Weighed once, when first read (by the generator, before it runs the model).
        """
        return RequestWeighing(
            self.refusal, self.question, self.sources, self.history, self.constrained
        )

    @property
    def refusal_band(self) -> Band:
        """What the sources' support of the question lets the answer be (``Refusal.band``)."""
        return self.weighing.band

    @property
    def refusal_support(self) -> float | None:
        """How well the sources support the question (``Refusal.score``), where it is measured."""
        check = self.weighing.check
        return None if check is None else check.support

    def refusal_reason(self) -> str | None:
        """Why the answer is, or may be, the refusal (``Refusal.explain``), where it is measured."""
        check = self.weighing.check
        return None if check is None else check.reason

    @property
    def refusal_check(self) -> RefusalCheck | None:
        """What weighing the question against the sources gave (``RequestWeighing.check``)."""
        return self.weighing.check

    @property
    def offered_refusal(self) -> str | None:
        """The refusal sentence when the model may choose it (``Band.OFFER``), else ``None``."""
        return self.weighing.offered

    def refused(self) -> CitedAnswer | None:
        """The refusal answer when the support is too low to run the model (``Band.REFUSE``)."""
        return self.weighing.refused()

    def abstains(self, text: str) -> bool:
        """Whether ``text`` is this request's refusal sentence."""
        return self.weighing.abstains(text)

    def messages(self) -> list[dict[str, str]]:
        """The chat messages the model is shown (unless ``prompt`` replaces them).

        When the model may choose the refusal, the instructions say so.
        """
        instructions = self.instructions
        if self.refusal is not None and self.offered_refusal is not None:
            base = instructions or default_instructions(self.policy)
            instructions = base + self.refusal.instruction()
        return build_messages(self.question, self.sources, self.policy, instructions, self.history)

    def grammar_text(
        self, *, spell_quotes: bool, bound_words: bool = True, count_words: bool = True
    ) -> str:
        """The GBNF grammar of this request.

        ``spell_quotes``: write the verbatim quotes of each source out as grammar rules (for a
        serving engine); local generation enforces them with ``QuoteGuard`` instead.
        ``bound_words=False``, ``count_words=False``: leave ``max_word_chars``, and
        ``max_sentence_words``, to ``WordBound`` (local generation).
        """
        quote_sources = self.sources if spell_quotes and self.quotable_chars is not None else None
        return render_grammar(
            self.n_sources, self.policy, self.grammar, quote_sources, self.terms,
            bound_words=bound_words, count_words=count_words, refusal=self.offered_refusal,
        )

    def replace(self, **changes: Any) -> GenerationRequest:
        """A copy with some fields (or grammar options, by name) changed; all checked again."""
        return dataclasses.replace(self, **_fold_grammar(changes, self.grammar))


class GenerationOptions(TypedDict, total=False):
    """The keyword options of ``generate``/``stream`` (and their async twins), all optional.

    These are ``GenerationRequest``'s fields after ``policy`` and the ``GrammarOptions`` fields
    (a test keeps the three lists equal); each is documented on its field there.
    """

    max_new_tokens: int
    do_sample: bool
    temperature: float
    seed: int | None
    instructions: str | None
    history: Sequence[tuple[str, str]]
    prompt: str | None
    constrained: bool
    grammar: GrammarOptions
    evidence: Evidence | str | None
    readability: Readability | None
    refusal: Refusal | None
    max_group: int
    max_sentence_words: int
    max_word_chars: int
    max_quote_chars: int
    min_quote_chars: int
    quotable_chars: int
    verbatim_quotes: bool
    sentence_ends: str
    source_terms: bool


def option_names() -> tuple[str, ...]:
    """Every generation option: ``request_option_names()``, then the grammar options."""
    return (*request_option_names(), *GrammarOptions.names())


def request_option_names() -> tuple[str, ...]:
    """The generation options that are ``GenerationRequest`` fields, in order.

    Those marked ``OPTION`` in their metadata: never found by their position.
    """
    return tuple(spec.name for spec in fields(GenerationRequest) if spec.metadata.get("option"))


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
    folded = _fold_grammar(dict(options), GrammarOptions())
    return GenerationRequest(question, sources, policy, **folded)  # type: ignore[arg-type]


def request_template(
    policy: Policy | str = DEFAULT_POLICY, **options: Unpack[GenerationOptions]
) -> GenerationRequest:
    """A request checked without its question and sources: a wrapper's settings, fixed once.

    ``template.replace(question=..., sources=...)`` makes each call's request.
    """
    return build_request(_TEMPLATE_QUESTION, _TEMPLATE_SOURCES, policy, **options)


def _fold_grammar(options: dict[str, Any], base: GrammarOptions) -> dict[str, Any]:
    """``options`` with grammar options given by name folded into ``grammar``.

    Unknown names raise, listing the valid ones.
    """
    request_options = request_option_names()
    known = {"question", "sources", "policy", *request_options, *GrammarOptions.names()}
    unknown = sorted(set(options) - known)
    if unknown:
        raise InputTypeError(
            f"unknown option(s) {unknown}; generation options are "
            f"{', '.join(request_options)} and the grammar options "
            f"{', '.join(GrammarOptions.names())}"
        )
    by_name = {name: options.pop(name) for name in GrammarOptions.names() if name in options}
    if by_name:
        grammar = options.get("grammar", base)
        if not isinstance(grammar, GrammarOptions):
            raise InputTypeError(
                f"grammar must be a citeformer.GrammarOptions, got {type(grammar).__name__}"
            )
        options["grammar"] = GrammarOptions.of({**grammar.as_dict(), **by_name})
    return options


def _check_bool(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise InputTypeError(f"{name} must be True or False, got {shown(value)}")
    return value


def _check_temperature(value: object) -> float:
    try:
        return check_float("temperature", value, MIN_TEMPERATURE, MAX_TEMPERATURE)
    except InvalidInputError as error:
        if (
            isinstance(value, (int, float)) and not isinstance(value, bool)
            and value < MIN_TEMPERATURE
        ):
            raise InvalidInputError(f"{error}; use do_sample=False for greedy decoding") from None
        raise


def _check_seed(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputTypeError(
            f"seed must be an int or None, got {type(value).__name__} {shown(value)}"
        )
    if not 0 <= value <= MAX_SEED:
        raise InvalidInputError(f"seed must be between 0 and 2**63-1, got {shown(value)}")
    return value


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
    return check_encodable(name, value)


_PROTOCOLS = ("AnswerChunks", "AnswerGenerator", "AsyncAnswerChunks", "AsyncAnswerGenerator")


def __getattr__(name: str) -> Any:
    # The generators' protocols live in citeformer.generation.protocols (they name this
    # module's request, so importing them here at module level would make a cycle); imports
    # of them from here keep working.
    if name in _PROTOCOLS:
        from citeformer.generation import protocols

        return getattr(protocols, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
