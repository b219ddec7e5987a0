"""From what a server sent to a ``CitedAnswer``, trusting none of it.

A completion body (or the events of a streamed one) is read strictly: anything that is not an
OpenAI-style completion of one answer is a ``ServerResponseError``. A constrained answer is then
re-parsed against the grammar that was sent (``GrammarCheck``) and goes through the marker and
quote checks every generator shares (``citeformer.answers.cited_answer``); what either refuses
is a ``ServerIgnoredGrammarError``. A stream is checked piece by piece as it arrives, before any
of it is shown, in time linear in the text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from citeformer.answers import bad_markers, cited_answer, unshown_text
from citeformer.errors import (
    GrammarViolationError,
    ServerConnectionError,
    ServerIgnoredGrammarError,
    ServerResponseError,
)
from citeformer.server._engines import ServerCall
from citeformer.server._errors import error_message, json_of
from citeformer.server._recheck import GrammarCheck
from citeformer.server._sse import Event
from citeformer.types import CitedAnswer, FinishReason

MAX_BYTES_PER_TOKEN = 64
"""Most UTF-8 bytes one generated token is taken to decode to (the longest tokens of common
vocabularies, runs of spaces or dashes, hold well under 64)."""
ANSWER_SLACK_BYTES = 4096
"""Bytes an answer may hold beyond ``MAX_BYTES_PER_TOKEN`` per token of ``max_new_tokens``."""
SHOWN_TEXT_CHARS = 2000
"""The most of an answer an error message quotes."""

_BRACKET_OR_QUOTE = re.compile(r'[\[\]"]')


def answer_limit(call: ServerCall) -> int:
    """The most bytes an answer to ``call`` can hold: what ``max_new_tokens`` can produce."""
    return MAX_BYTES_PER_TOKEN * call.request.max_new_tokens + ANSWER_SLACK_BYTES


def body_limit(call: ServerCall) -> int:
    """The most bytes a body (or one event) answering ``call`` can hold.

    That is the answer escaped in JSON (at most 6 bytes a byte), and the rest of a completion.
    """
    return 6 * answer_limit(call) + (1 << 20)


def completed(call: ServerCall, body: bytes) -> CitedAnswer:
    """The answer in a completion body, checked."""
    data = json_of(body, call.base_url)
    if not isinstance(data, dict):
        raise _malformed(call, "the body is not a JSON object", data)
    if data.get("error") is not None:
        raise ServerResponseError(
            f"the server at {call.base_url} answered with an error: {error_message(data)}",
            status_code=200, body=json.dumps(data)[:SHOWN_TEXT_CHARS],
        )
    choices = data.get("choices")
    if not choices:
        raise ServerResponseError(
            f"the server at {call.base_url} answered without choices: "
            f"{json.dumps(data)[:500]}",
            status_code=200, body=json.dumps(data),
        )
    if not isinstance(choices, list):
        raise _malformed(call, f"choices is a {type(choices).__name__}, not a list", data)
    if len(choices) != 1:
        raise _malformed(call, f"{len(choices)} choices for a request of one answer", data)
    choice = _choice(call, choices[0], data)
    text = _text(call, choice, data, delta=False)
    if text is None:
        raise _malformed(call, "the choice holds no text (message.content or text)", data)
    finish = _finish(call, _finish_reason(call, choice, data), text)
    usage = _usage(call, data)
    check = _Check(call)
    check.add(text)
    check.feed(text)
    return check.answer(
        text, finish, usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0)
    )


class StreamAssembler:
    """Turns the events of one streamed completion into the chunks shown, then the answer."""

    def __init__(self, call: ServerCall) -> None:
        self._call = call
        self._check = _Check(call)
        self._shown = _Shown(quotes=call.request.quotable_chars is not None)
        self._pieces = 0
        self._finish: str | None = None
        self._usage: dict[str, int] = {}
        self._done = False

    def feed(self, event: Event) -> str | None:
        """Take one event (``None`` for ``[DONE]``); return the new text the stream may show."""
        if event is None:
            self._done = True
            return None
        if event.get("error") is not None:
            raise ServerResponseError(
                f"the server at {self._call.base_url} reported an error mid-answer: "
                f"{error_message(event)}",
                status_code=200, body=json.dumps(event)[:SHOWN_TEXT_CHARS],
            )
        if event.get("usage") is not None:
            self._usage = _usage(self._call, event)
        choices = event.get("choices")
        if choices is None:
            return None
        if not isinstance(choices, list):
            raise _malformed(self._call, f"choices is a {type(choices).__name__}", event)
        shown: list[str] = []
        for item in choices:
            choice = _choice(self._call, item, event)
            piece = _text(self._call, choice, event, delta=True)
            if piece and self._finish is not None:
                raise _malformed(self._call, "text after the finish reason", event)
            if piece:
                self._pieces += 1
                self._check.add(piece)
                self._check.feed(piece, self._shown.text)
                if (chunk := self._shown.add(piece)) is not None:
                    self._check.shown(chunk)
                    shown.append(chunk)
            self._finish = _finish_reason(self._call, choice, event) or self._finish
        return "".join(shown) or None

    def lost(self, error: Exception) -> ServerConnectionError:
        """The error of a connection lost mid-answer."""
        return ServerConnectionError(
            f"the connection to {self._call.base_url} was lost mid-answer, after "
            f"{self._shown.length} characters ({type(error).__name__}: {error}); the answer is "
            "incomplete and was not returned"
        )

    def finish(self) -> tuple[CitedAnswer, str]:
        """The answer, and what it holds beyond the chunks shown."""
        if self._finish is None:
            # No finish reason: the stream ended without the engine finishing the answer.
            raise ServerConnectionError(
                f"the stream from {self._call.base_url} ended after {self._shown.length} "
                f"characters without a finish reason{'' if self._done else ' or [DONE]'}; the "
                "answer is incomplete and was not returned"
            )
        text = self._shown.text()
        answer = self._check.answer(
            text, _finish(self._call, self._finish, text),
            self._usage.get("prompt_tokens", 0),
            self._usage.get("completion_tokens", self._pieces),
        )
        return answer, unshown_text(answer.text, text[:self._shown.shown])


class _Check:
    """The checks of one answer: its size, the grammar it was sent with, markers and quotes."""

    def __init__(self, call: ServerCall) -> None:
        self._call = call
        self._grammar = GrammarCheck(call.grammar) if call.grammar is not None else None
        self._limit = answer_limit(call)
        self._size = 0

    def add(self, piece: str) -> None:
        """Count ``piece`` against the size ``max_new_tokens`` allows."""
        self._size += len(piece) if piece.isascii() else len(piece.encode())
        if self._size > self._limit:
            raise ServerResponseError(
                f"the server at {self._call.base_url} sent an answer of more than "
                f"{self._limit} bytes, more than {self._call.request.max_new_tokens} tokens "
                f"(max_new_tokens) can produce at {MAX_BYTES_PER_TOKEN} bytes a token; the "
                "answer was not returned",
                status_code=200, body="",
            )

    def feed(self, piece: str, text: Callable[[], str] | None = None) -> None:
        """Match ``piece`` against the grammar; raise if it refuses.

        ``text()`` gives the text before ``piece``, for the message (``None``: there is none).
        """
        if self._grammar is None:
            return
        offset = self._grammar.feed(piece)
        if offset is not None:
            whole = piece if text is None else text() + piece
            raise _refused(self._call, whole, offset)

    def shown(self, chunk: str) -> None:
        """Check a chunk about to be shown for a marker outside 1..N.

        The grammar has already refused any; this check does not depend on it.
        """
        if self._grammar is not None and ("[" in chunk or "]" in chunk):
            bad = bad_markers(chunk, self._call.request.n_sources, finished=False)
            if bad:
                raise _ignored_marker(self._call, bad[0], chunk)

    def answer(
        self, text: str, finish: FinishReason, prompt_tokens: int, generated_tokens: int
    ) -> CitedAnswer:
        if self._grammar is not None and finish == "stop" and not self._grammar.complete():
            raise _refused(self._call, text, len(text))
        return _cited(self._call, text, finish, prompt_tokens, generated_tokens)


class _Shown:
    """What a stream may show of an answer so far, updated in time linear in the text.

    The rules of ``citeformer.answers.safe_prefix``, applied to each new piece alone: nothing of
    a marker before its ``]``, nothing of a verbatim quote before its marker, no white space
    (or undecoded byte) at the end.
    """

    def __init__(self, *, quotes: bool) -> None:
        self._quotes = quotes
        self._pieces: list[str] = []
        self._unshown: list[str] = []  # the text after the part shown
        self.length = 0
        """Characters received."""
        self.shown = 0
        """Characters shown: ``text()[:shown]``."""
        self._content_end = 0  # just past the last character that is not white space
        self._marker_cut: int | None = None  # where to cut while a marker is open
        self._quote_cut: int | None = None  # where to cut while a quote waits for its marker
        self._quote_closed = False

    def text(self) -> str:
        """Everything received."""
        if len(self._pieces) > 1:
            self._pieces = ["".join(self._pieces)]
        return self._pieces[0] if self._pieces else ""

    def add(self, piece: str) -> str | None:
        """Take the next piece; return the text that may now be shown, if any."""
        start = self.length
        self._pieces.append(piece)
        self._unshown.append(piece)
        self.length += len(piece)
        last = 0
        for match in _BRACKET_OR_QUOTE.finditer(piece):
            self._content(piece, start, last, match.start())
            self._mark(match.group(), start + match.start())
            last = match.end()
        self._content(piece, start, last, len(piece))
        end = self._content_end
        if self._quote_cut is not None:
            end = self._quote_cut
        elif self._marker_cut is not None:
            end = self._marker_cut
        if end <= self.shown:
            return None
        unshown = "".join(self._unshown)
        chunk, rest = unshown[:end - self.shown], unshown[end - self.shown:]
        self._unshown = [rest] if rest else []
        self.shown = end
        return chunk

    def _content(self, piece: str, start: int, begin: int, end: int) -> None:
        kept = piece[begin:end].rstrip()
        while kept.endswith("\ufffd"):
            kept = kept.rstrip("\ufffd").rstrip()
        if kept:
            self._content_end = start + begin + len(kept)

    def _mark(self, char: str, offset: int) -> None:
        if char == "[":
            if self._marker_cut is None:
                self._marker_cut = self._content_end
        elif char == "]":
            self._marker_cut = None
            if self._quote_closed:  # the marker of a quote: the quote may be shown
                self._quote_cut, self._quote_closed = None, False
        elif self._quotes:
            if self._quote_cut is None:
                self._quote_cut = self._content_end
            else:
                self._quote_closed = not self._quote_closed
        self._content_end = offset + 1


def _choice(call: ServerCall, choice: object, data: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(choice, dict):
        raise _malformed(call, f"a choice is a {type(choice).__name__}, not an object", data)
    index = choice.get("index", 0)
    if index != 0 or isinstance(index, bool):
        # Several answers interleaved (n > 1, or a server that ignores n): never merged.
        raise _malformed(call, f"a choice of index {index!r}: only one answer was asked for", data)
    return choice


def _text(
    call: ServerCall, choice: dict[str, Any], data: dict[str, Any], *, delta: bool
) -> str | None:
    # Chat completions put text in message/delta.content, text completions in text.
    name = "delta" if delta else "message"
    holder = choice.get(name)
    if holder is not None:
        if not isinstance(holder, dict):
            raise _malformed(call, f"{name} is a {type(holder).__name__}, not an object", data)
        content = holder.get("content")
        if content is not None and not isinstance(content, str):
            raise _malformed(
                call, f"{name}.content is a {type(content).__name__} ({content!r:.40}), "
                "not text", data,
            )
        if content is not None or "text" not in choice:
            return content
    text = choice.get("text")
    if text is not None and not isinstance(text, str):
        raise _malformed(call, f"text is a {type(text).__name__} ({text!r:.40}), not text", data)
    return text


def _finish_reason(
    call: ServerCall, choice: dict[str, Any], data: dict[str, Any]
) -> str | None:
    reason = choice.get("finish_reason")
    if reason is None or isinstance(reason, str):
        return reason or None
    raise _malformed(call, f"finish_reason is {reason!r}, not a string", data)


def _finish(call: ServerCall, reason: str | None, text: str) -> FinishReason:
    if reason == "length":
        return "length"
    if reason in ("stop", "eos", None):
        return "stop"
    raise ServerResponseError(
        f"the server at {call.base_url} ended the answer with finish_reason {reason!r} "
        f"(neither 'stop' nor 'length'): {_quoted(text)}",
        status_code=200, body=text[:SHOWN_TEXT_CHARS],
    )


def _usage(call: ServerCall, data: dict[str, Any]) -> dict[str, int]:
    usage = data.get("usage")
    if usage is None:
        return {}
    if not isinstance(usage, dict):
        raise _malformed(call, f"usage is a {type(usage).__name__}, not an object", data)
    counts = {}
    for name in ("prompt_tokens", "completion_tokens"):
        value = usage.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise _malformed(call, f"usage.{name} is {value!r:.40}, not a count of tokens", data)
        counts[name] = value
    return counts


def _malformed(call: ServerCall, what: str, data: object) -> ServerResponseError:
    body = json.dumps(data)
    return ServerResponseError(
        f"the server at {call.base_url} sent a completion that cannot be read: {what}; the "
        f"answer was not returned. It sent: {body[:300]}",
        status_code=200, body=body[:SHOWN_TEXT_CHARS],
    )


def _cited(
    call: ServerCall, text: str, finish: FinishReason, prompt_tokens: int, generated_tokens: int
) -> CitedAnswer:
    try:
        return cited_answer(
            call.request, text, finish, prompt_tokens=prompt_tokens,
            generated_tokens=generated_tokens,
            violation=lambda marker, text: _ignored_marker(call, marker, text),
        )
    except ServerIgnoredGrammarError:
        raise
    except GrammarViolationError as error:  # a quote the source does not hold
        raise ServerIgnoredGrammarError(
            f"the server at {call.base_url} returned a quote that is not verbatim ({error}): "
            f"the server ignored the citation grammar. {_advice(call)} The answer was not "
            f"returned: {_quoted(text)}",
            marker=str(error),
        ) from error


def _refused(call: ServerCall, text: str, offset: int) -> ServerIgnoredGrammarError:
    """The error for text the grammar refuses at ``offset`` (``len(text)``: it cannot end)."""
    start, end = _offending(text, offset)
    # Where the marker or quote checks see what is wrong, their words say it better; they read
    # the text only up to the refused span, which the grammar accepted before it.
    try:
        _cited(call, text[:end], "stop", 0, 0)
    except ServerIgnoredGrammarError as error:
        return error
    if offset >= len(text):
        what = "it ends where the grammar does not let an answer end"
    else:
        what = f"the grammar refuses {text[start:end]!r} at offset {offset}"
    return ServerIgnoredGrammarError(
        f"the server at {call.base_url} returned an answer the citation grammar sent with the "
        f"request does not allow ({what}): the server ignored the citation grammar. "
        f"{_advice(call)} The answer was not returned: {_quoted(text)}",
        marker=text[start:end],
    )


def _offending(text: str, offset: int) -> tuple[int, int]:
    """The span to name for text refused at ``offset``: its marker, else its character."""
    opened = text.rfind("[", 0, offset + 1)
    if opened >= 0 and text.rfind("]", opened, offset) < 0:
        closing = text.find("]", offset, offset + 40)
        return opened, (closing + 1 if closing >= 0 else min(len(text), opened + 12))
    return offset, min(len(text), offset + 1)


def _ignored_marker(call: ServerCall, marker: str, text: str) -> ServerIgnoredGrammarError:
    return ServerIgnoredGrammarError(
        f"the server at {call.base_url} returned marker {marker!r}, which names no source in "
        f"1..{call.request.n_sources}: the server ignored the citation grammar. "
        f"{_advice(call)} The answer was not returned: {_quoted(text)}",
        marker=marker,
    )


def _advice(call: ServerCall) -> str:
    advice = (
        f"The grammar was sent in the {call.grammar_field!r} field, which engine="
        f"{call.engine!r} reads: check that this is the engine serving {call.base_url} (see "
        "ServerGenerator(engine=...)) and that its grammar backend is enabled."
    )
    if call.engine == "vllm-guided":
        advice += (
            " vLLM v0.12.0 and later ignore 'guided_grammar' without an error: for those, "
            "use engine='vllm'."
        )
    return advice


def _quoted(text: str) -> str:
    if len(text) <= SHOWN_TEXT_CHARS:
        return repr(text)
    return f"{text[:SHOWN_TEXT_CHARS]!r}... ({len(text)} characters)"
