"""One validated generation request, and the protocols of the generators that answer it.

``GenerationRequest`` is the one list of generation options: its fields. It checks every field
when it is made (``build_request``, ``GenerationRequest(...)``, ``replace``), so ``CiteGenerator``,
``ServerGenerator``, both framework wrappers and the command line hand one frozen object on
instead of re-checking and re-spelling a dozen keyword arguments at every layer. A wrapper checks
its settings once, into a template (``request_template``), and replaces the question and
sources per call.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import TYPE_CHECKING, Any, Final, Protocol, TypedDict, runtime_checkable

from citeformer.errors import (
    EmptyQuestionError,
    EmptySourceError,
    InputTypeError,
    InvalidInputError,
    NoSourcesError,
    check_float,
    check_int,
    shown,
)
from citeformer.evidence.refusal import Band, Refusal
from citeformer.evidence.scoring import DEFAULT_EVIDENCE, Evidence, resolve_evidence
from citeformer.grammar.markers import strip_markers
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
    "AnswerChunks",
    "AnswerGenerator",
    "AsyncAnswerChunks",
    "AsyncAnswerGenerator",
    "GenerationOptions",
    "GenerationRequest",
    "GeneratorDefault",
    "SourceLike",
    "build_request",
    "check_encodable",
    "check_history",
    "check_question",
    "normalize_sources",
    "option_names",
    "request_template",
]

SourceLike = Source | str

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

# The placeholder a template is checked with; ``GenerationRequest.replace`` puts the real ones in.
_TEMPLATE_QUESTION = "?"
_TEMPLATE_SOURCES = (Source("?"),)


@dataclass(frozen=True)
class GenerationRequest:
    """Everything one answer depends on, checked when made. Build it with ``build_request``.

    The fields after ``policy`` are the generation options, as keywords of ``build_request``,
    ``generate`` and ``stream``; a grammar option (``max_group``, ...) may be given there by its
    own name instead of through ``grammar``.
    """

    question: str
    """The question, a non-blank string."""

    sources: tuple[Source, ...]
    """The numbered sources: marker ``[k]`` cites ``sources[k - 1]``."""

    policy: Policy = DEFAULT_POLICY
    """Where the grammar requires markers."""

    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    """Most tokens to generate, 1 to ``MAX_NEW_TOKENS`` (2**31-1)."""

    do_sample: bool = False
    """Sample (at ``temperature``) instead of greedy decoding."""

    temperature: float = 1.0
    """Sampling temperature, 0.01 to 100 (``MIN_TEMPERATURE``, ``MAX_TEMPERATURE``); used when
    ``do_sample``."""

    seed: int | None = None
    """Seed of the sampler (0..2**63-1), for reproducible samples, or ``None``."""

    instructions: str | None = None
    """System instructions replacing the policy's default ones."""

    history: tuple[tuple[str, str], ...] = ()
    """Earlier turns of the conversation, ``(role, text)`` with role ``"user"`` or
    ``"assistant"``, shown before this turn's sources and question (markers stripped)."""

    prompt: str | None = None
    """A whole prompt rendered by the caller, used instead of the built-in chat messages (it
    must number the sources as the markers do)."""

    constrained: bool = True
    """Whether the citation grammar is enforced; ``False`` is for comparisons only."""

    grammar: GrammarOptions = field(default_factory=GrammarOptions)
    """Options of the citation grammar."""

    evidence: Evidence | GeneratorDefault | None = GENERATOR_DEFAULT
    """How a marker's id is chosen among the valid ones: an ``Evidence`` (or its name,
    ``"lexical"``, ``"embedding"``), ``None`` (the model alone), or ``GENERATOR_DEFAULT``."""

    readability: Readability = field(default_factory=Readability)
    """How the prose around the markers is steered (``citeformer.readability``); ``None``
    turns every readability lever off."""

    refusal: Refusal | None = field(default_factory=Refusal)
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

    @property
    def refusal_band(self) -> Band:
        """What the sources' support of the question lets the answer be (``Refusal.band``).

        ``Band.ANSWER`` without ``refusal`` or without the grammar; measured once, when first
        read (by the generator, before it runs the model).
        """
        if self.refusal is not None and self.constrained:
            known = self.refusal.known_band()
            if known is not None:  # nothing to weigh (a serving engine's processor)
                return known
        check = self.refusal_check
        return Band.ANSWER if check is None else Band(check.band)

    @property
    def refusal_support(self) -> float | None:
        """How well the sources support the question (``Refusal.score``), where it is measured.

        ``None`` without ``refusal`` or the grammar, or with nothing to decide (a threshold of 0
        and no offer).
        """
        check = self.refusal_check
        return None if check is None else check.support

    def refusal_reason(self) -> str | None:
        """Why the answer is, or may be, the refusal (``Refusal.explain``), where it is measured."""
        check = self.refusal_check
        return None if check is None else check.reason

    @cached_property
    def refusal_check(self) -> RefusalCheck | None:
        """What weighing the question against the sources gave: every answer's ``refusal``.

        ``None`` where ``refusal_support`` is. The question is weighed once, for the band, the
        support and the reason.
        """
        refusal = self.refusal
        if refusal is None or not self.constrained or not refusal.decides:
            return None
        weighed = refusal.weigh(self.question, self.sources, self.history)
        return RefusalCheck(
            measure=refusal.support, support=weighed[0], threshold=refusal.limit,
            offer_below=refusal.offer_below, band=refusal.band_at(weighed[0]).value,
            reason=refusal.explain(self.question, self.sources, self.history, weighed=weighed),
        )

    @property
    def offered_refusal(self) -> str | None:
        """The refusal sentence when the model may choose it (``Band.OFFER``), else ``None``."""
        if self.refusal is not None and self.refusal_band is Band.OFFER:
            return self.refusal.text
        return None

    def refused(self) -> CitedAnswer | None:
        """The refusal answer when the support is too low to run the model (``Band.REFUSE``)."""
        if self.refusal is None or self.refusal_band is not Band.REFUSE:
            return None
        return CitedAnswer(
            text=self.refusal.text, citations=(), sources=self.sources, finish_reason="stop",
            abstained=True, refusal=self.refusal_check,
        )

    def abstains(self, text: str) -> bool:
        """Whether ``text`` is this request's refusal sentence."""
        return self.refusal is not None and text.strip() == self.refusal.text.strip()

    def messages(self) -> list[dict[str, str]]:
        """The chat messages the model is shown (unless ``prompt`` replaces them).

        When the model may choose the refusal, the instructions say so.
        """
        instructions = self.instructions
        if self.refusal is not None and self.offered_refusal is not None:
            base = instructions or default_instructions(self.policy)
            instructions = base + self.refusal.instruction()
        return build_messages(self.question, self.sources, self.policy, instructions, self.history)

    def grammar_text(self, *, spell_quotes: bool, bound_words: bool = True) -> str:
        """The GBNF grammar of this request.

        ``spell_quotes``: write the verbatim quotes of each source out as grammar rules (for a
        serving engine); local generation enforces them with ``QuoteGuard`` instead.
        ``bound_words=False``: leave ``max_word_chars`` to ``WordBound`` (local generation).
        """
        quote_sources = self.sources if spell_quotes and self.quotable_chars is not None else None
        return render_grammar(
            self.n_sources, self.policy, self.grammar, quote_sources, self.terms,
            bound_words=bound_words, refusal=self.offered_refusal,
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
    """Every generation option.

    ``GenerationRequest``'s fields after ``policy``, then the grammar options.
    """
    return (*_request_option_names(), *GrammarOptions.names())


def _request_option_names() -> tuple[str, ...]:
    return tuple(spec.name for spec in fields(GenerationRequest))[3:]


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
    request_options = _request_option_names()
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
        check_encodable(f"source {position}'s text", source.text)
        if isinstance(source.title, str):
            check_encodable(f"source {position}'s title", source.title)
        _check_metadata(f"source {position}'s metadata", source.metadata)
        normalized.append(source)
    return tuple(normalized)


def check_question(question: object) -> str:
    """The question, if it is a non-blank string."""
    if not isinstance(question, str):
        raise EmptyQuestionError(f"the question must be a string, got {type(question).__name__}")
    if not question.strip():
        raise EmptyQuestionError(f"the question is empty ({question!r}); ask something")
    return check_encodable("the question", question)


_SURROGATE = re.compile("[\ud800-\udfff]")


def check_encodable(name: str, text: str) -> str:
    """``text``, unless it holds a lone surrogate: a character no encoding can write.

    Such text comes from bytes decoded with ``errors="surrogateescape"`` or from a JSON escape
    of half a character pair; a tokenizer refuses it with a raw ``TypeError``. Every string from
    outside (question, sources, titles, metadata, history, instructions, prompt) is checked here.
    """
    found = _SURROGATE.search(text)
    if found is not None:
        raise InvalidInputError(
            f"{name} holds a lone surrogate (U+{ord(found.group()):04X}) at character "
            f"{found.start()}, which no text encoding can write; decode its bytes with "
            "errors='replace', or remove the character"
        )
    return text


def _check_metadata(name: str, value: object, depth: int = 0) -> None:
    # Metadata is not shown to the model but comes back in every answer (and its JSON).
    if isinstance(value, str):
        check_encodable(name, value)
    elif depth < 8 and isinstance(value, Mapping):
        for key, item in value.items():
            if isinstance(key, str):
                check_encodable(f"a key of {name}", key)
            _check_metadata(f"{name}[{key!r}]", item, depth + 1)
    elif depth < 8 and isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _check_metadata(f"{name}[{index}]", item, depth + 1)


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
        if not strip_markers(text):
            raise InvalidInputError(
                f"history[{index}] ({role}) holds only citation markers ({text!r:.40}); the "
                "model is shown earlier turns without their markers, so it would be an empty "
                "message: drop the turn"
            )
        turns.append((role, check_encodable(f"history[{index}] ({role})", text)))
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
    return check_encodable(name, value)


class AnswerChunks(Protocol):
    """A stream of one answer: iterate its text chunks once, then read ``answer``."""

    def __iter__(self) -> Iterator[str]:
        """The text chunks, which join to ``answer.text``."""
        ...

    @property
    def answer(self) -> CitedAnswer:
        """The finished answer, once iteration has ended."""
        ...


class AsyncAnswerChunks(Protocol):
    """An async stream of one answer: ``async for`` its chunks once, then read ``answer``."""

    def __aiter__(self) -> AsyncIterator[str]:
        """The text chunks, which join to ``answer.text``."""
        ...

    @property
    def answer(self) -> CitedAnswer:
        """The finished answer, once iteration has ended."""
        ...


@runtime_checkable
class AnswerGenerator(Protocol):
    """What the framework wrappers and the command line need of a generator.

    ``CiteGenerator`` (a model in this process), ``ServerGenerator`` (a model behind a serving
    engine) and ``citeformer.testing.FakeGenerator`` have it. Both methods take a checked
    ``GenerationRequest`` (``citeformer.build_request``). Optional: ``context_length`` (tokens
    the model accepts, or ``None``), read by the LlamaIndex wrapper.
    """

    def answer(self, request: GenerationRequest) -> CitedAnswer:
        """The answer to ``request``; every marker is ``[k]`` with 1 <= k <= N."""
        ...

    def answer_stream(self, request: GenerationRequest) -> AnswerChunks:
        """The answer to ``request`` as text chunks; the stream's ``answer`` is set at the end."""
        ...


@runtime_checkable
class AsyncAnswerGenerator(AnswerGenerator, Protocol):
    """A generator the wrappers' async paths await instead of running it in a worker thread.

    ``ServerGenerator`` and ``citeformer.testing.FakeGenerator`` are.
    """

    async def aanswer(self, request: GenerationRequest) -> CitedAnswer:
        """Async ``answer``."""
        ...

    def aanswer_stream(self, request: GenerationRequest) -> AsyncAnswerChunks:
        """Async ``answer_stream``: ``async for chunk in ...``, then ``.answer``."""
        ...
