"""What every generator shares: checking a call's arguments, showing an answer while it streams,
and turning the finished text into a ``CitedAnswer`` whose markers and quotes are re-checked.

``CiteGenerator`` (a local model) and ``ServerGenerator`` (a serving engine) differ only in how
text is produced; both go through these functions, so an answer means the same from either.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from citeformer.citations import scan_markers
from citeformer.errors import (
    EmptyQuestionError,
    EmptySourceError,
    GrammarViolationError,
    NoSourcesError,
)
from citeformer.quotes import DEFAULT_QUOTABLE_CHARS, find_quotes, trim_open_quote
from citeformer.types import CitedAnswer, FinishReason, Policy, Quote, Source

SourceLike = Source | str

DEFAULT_MAX_NEW_TOKENS = 160


def normalize_sources(sources: Sequence[SourceLike]) -> tuple[Source, ...]:
    """Turn a list of ``Source`` or strings into Sources, rejecting what cannot be cited."""
    if isinstance(sources, (str, Source)) or not isinstance(sources, Sequence):
        raise TypeError(
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
            raise TypeError(
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
    if not isinstance(question, str):
        raise EmptyQuestionError(f"the question must be a string, got {type(question).__name__}")
    if not question.strip():
        raise EmptyQuestionError(f"the question is empty ({question!r}); ask something")
    return question


def check_decoding(max_new_tokens: object, do_sample: bool, temperature: float) -> None:
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or (
        max_new_tokens < 1
    ):
        raise ValueError(f"max_new_tokens must be a positive int, got {max_new_tokens!r}")
    if do_sample and not temperature > 0:
        raise ValueError(f"temperature must be > 0 when sampling, got {temperature!r}")


def quotable_chars(
    policy: Policy, constrained: bool, options: Mapping[str, int | bool]
) -> int | None:
    """How much of each source verbatim quotes may use, or None when quotes are not checked."""
    if constrained and policy is Policy.QUOTES_ONLY and options.get("verbatim_quotes", True):
        return int(options.get("quotable_chars", DEFAULT_QUOTABLE_CHARS))
    return None


def trim_open_marker(text: str) -> str:
    """Drop a marker cut off by the token budget (``... France [1``), and the space before it."""
    opened = text.rfind("[")
    if opened > text.rfind("]"):
        return text[:opened].rstrip(" ")
    return text


def safe_prefix(text: str, *, quotes: bool = False) -> str:
    """What a stream may show of ``text`` so far.

    No half-decoded character, no marker still open, no verbatim quote before its marker (the
    answer drops it if the budget cuts it), and no trailing white space, which the answer loses
    if the budget then cuts a marker open after it (tokenizers that spell " [" as " " then "["
    would otherwise stream a space the answer lacks).
    """
    text = trim_open_marker(text.rstrip("\ufffd"))
    return (trim_open_quote(text) if quotes else text).rstrip()


def bad_markers(text: str, n_sources: int, *, finished: bool) -> list[str]:
    """Markers the grammar forbids: outside 1..n, malformed, or (``finished``) left open."""
    scan = scan_markers(text, n_sources)
    bad = [text[c.start:c.end] for c in scan.out_of_range]
    bad += [text[start:end] for start, end in scan.malformed]
    opened = text.rfind("[")
    if finished and opened > text.rfind("]"):
        bad.append(text[opened:opened + 12])
    return bad


class StreamedAnswer:
    """Base of the answer streams: iterated once, then ``answer`` holds the ``CitedAnswer``."""

    def __init__(self) -> None:
        self._answer: CitedAnswer | None = None
        self._started = False

    @property
    def answer(self) -> CitedAnswer:
        """The finished ``CitedAnswer``; available once iteration has ended."""
        if self._answer is None:
            raise RuntimeError("the stream has not finished yet: iterate over it to the end first")
        return self._answer

    def _start(self) -> None:
        if self._started:
            raise RuntimeError("an answer stream can be iterated only once")
        self._started = True


class ChunkTracker:
    """Turns the growing text of an answer into the chunks a stream shows; they join to it."""

    def __init__(self, *, quotes: bool) -> None:
        self._quotes = quotes
        self.emitted = ""

    def update(self, text: str) -> str | None:
        """The new visible text, once ``text`` (everything so far) shows more than before."""
        visible = safe_prefix(text, quotes=self._quotes)
        if len(visible) > len(self.emitted) and visible.startswith(self.emitted):
            chunk = visible[len(self.emitted):]
            self.emitted = visible
            return chunk
        return None

    def rest(self, answer: CitedAnswer) -> str:
        """What the finished answer holds beyond the chunks already shown."""
        shown = self.emitted
        return answer.text[len(shown):] if answer.text.startswith(shown) else ""


def cited_answer(
    text: str,
    sources: tuple[Source, ...],
    finish: FinishReason,
    *,
    constrained: bool,
    quotable: int | None,
    prompt_tokens: int,
    generated_tokens: int,
    violation: Callable[[str, str], GrammarViolationError] | None = None,
) -> CitedAnswer:
    """The ``CitedAnswer`` of a finished text; a constrained text is re-checked.

    A constrained text cut by the budget loses its open marker (and open quote); then any marker
    outside 1..N, malformed or left open, raises ``violation(marker, text)`` (by default a
    ``GrammarViolationError``), and a quote that is not verbatim a ``GrammarViolationError``:
    either can only mean that the grammar was not enforced.
    """
    n = len(sources)
    quotes: tuple[Quote, ...] = ()
    if constrained:
        if finish == "length":
            text = trim_open_marker(text)
            if quotable is not None:
                text = trim_open_quote(text)
        bad = bad_markers(text, n, finished=True)
        if bad:
            raise (violation or _violation(n))(bad[0], text)
        if quotable is not None:
            quotes = find_quotes(text, sources, quotable_chars=quotable)
    return CitedAnswer(
        text=text,
        citations=tuple(scan_markers(text, n).citations),
        sources=sources,
        finish_reason=finish,
        prompt_tokens=prompt_tokens,
        generated_tokens=generated_tokens,
        quotes=quotes,
    )


def _violation(n: int) -> Callable[[str, str], GrammarViolationError]:
    def error(marker: str, text: str) -> GrammarViolationError:
        return GrammarViolationError(
            f"constrained output holds marker {marker!r}, which names no source in 1..{n}: "
            f"{text!r}"
        )

    return error
