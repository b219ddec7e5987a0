"""What every generator shares once text is produced: streaming it, and re-checking the answer.

Showing an answer while it streams, and turning the finished text into a ``CitedAnswer`` whose
markers and quotes are re-checked.

``CiteGenerator`` (a local model) and ``ServerGenerator`` (a serving engine) differ only in how
text is produced; both go through these functions, so an answer means the same from either.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Callable, Iterator

from citeformer.errors import GrammarViolationError
from citeformer.evidence.spans import with_evidence
from citeformer.grammar.markers import scan_markers
from citeformer.grammar.quotes import find_quotes, trim_open_quote
from citeformer.request import GenerationRequest
from citeformer.types import CitedAnswer, FinishReason, Policy, Quote

__all__ = [
    "ChunkTracker",
    "StreamedAnswer",
    "WholeAnswer",
    "bad_markers",
    "cited_answer",
    "safe_prefix",
    "trim_open_marker",
    "unshown_text",
]

logger = logging.getLogger(__name__)

_WORD = re.compile(r"[^\W_]")


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
    """What the grammar forbids in ``text``, in order of appearance.

    Markers outside 1..n, malformed spans, and every bracket outside a marker; a last ``[``
    still open counts only once the answer is ``finished``.
    """
    scan = scan_markers(text, n_sources)
    found = [(c.start, text[c.start:c.end]) for c in scan.out_of_range]
    found += [(start, text[start:end]) for start, end in scan.malformed]
    last_bracket = max(text.rfind("["), text.rfind("]"))
    for offset in scan.stray:
        still_open = text[offset] == "[" and offset == last_bracket
        if finished or not still_open:
            found.append((offset, text[offset:offset + 12]))
    return [marker for _, marker in sorted(found)]


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


class WholeAnswer(StreamedAnswer):
    """A finished answer as a stream of one chunk, iterated or async-iterated.

    For a refusal that ran no model, and an engine that does not stream.
    """

    def __init__(self, answer: CitedAnswer) -> None:
        super().__init__()
        self._done = answer

    def __iter__(self) -> Iterator[str]:
        self._start()
        self._answer = self._done
        return iter([self._done.text] if self._done.text else [])

    def __aiter__(self) -> AsyncIterator[str]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[str]:
        for chunk in self:
            yield chunk


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
        return unshown_text(answer.text, self.emitted)


def unshown_text(text: str, shown: str) -> str:
    """What a finished answer's ``text`` holds beyond the ``shown`` chunks (they are a prefix)."""
    return text[len(shown):] if text.startswith(shown) else ""


def cited_answer(
    request: GenerationRequest,
    text: str,
    finish: FinishReason,
    *,
    prompt_tokens: int,
    generated_tokens: int,
    violation: Callable[[str, str], GrammarViolationError] | None = None,
) -> CitedAnswer:
    """The ``CitedAnswer`` of a finished text; a constrained text is re-checked.

    Every citation gets its ``evidence``: the span of its source that best supports the claim.

    A constrained text cut by the budget loses its open marker (and open quote); then any marker
    outside 1..N, malformed or left open, raises ``violation(marker, text)`` (by default a
    ``GrammarViolationError``), and a quote that is not verbatim a ``GrammarViolationError``:
    either can only mean that the grammar was not enforced.
    """
    n = request.n_sources
    quotable = request.quotable_chars
    quotes: tuple[Quote, ...] = ()
    if request.constrained:
        if finish == "length":
            text = trim_open_marker(text)
            if quotable is not None:
                text = trim_open_quote(text)
        bad = bad_markers(text, n, finished=True)
        if bad:
            raise (violation or _violation(n))(bad[0], text)
        if quotable is not None:
            quotes = find_quotes(text, request.sources, quotable_chars=quotable)
    if finish == "length":
        _warn_cut(request, text)
    return CitedAnswer(
        text=text,
        citations=with_evidence(
            text, scan_markers(text, n).citations, request.sources, request.question
        ),
        sources=request.sources,
        finish_reason=finish,
        prompt_tokens=prompt_tokens,
        generated_tokens=generated_tokens,
        quotes=quotes,
        abstained=request.abstains(text),
        refusal=request.refusal_check,
        constrained=request.constrained,
    )


def _warn_cut(request: GenerationRequest, text: str) -> None:
    """Log that the budget cut the answer.

    Under a policy that cites every claim, say whether its last claim went uncited (the budget
    ran out before its marker).
    """
    tail = text[text.rfind("]") + 1:]
    uncited = request.constrained and request.policy is Policy.REQUIRED and _WORD.search(tail)
    logger.warning(
        "the answer was cut at max_new_tokens=%d%s; raise max_new_tokens for a whole answer: %r",
        request.max_new_tokens, " before its last claim was cited" if uncited else "",
        text[-80:],
    )


def _violation(n: int) -> Callable[[str, str], GrammarViolationError]:
    def error(marker: str, text: str) -> GrammarViolationError:
        return GrammarViolationError(
            f"constrained output holds marker {marker!r}, which names no source in 1..{n}: "
            f"{text!r}"
        )

    return error
