"""``FakeGenerator``: a scripted answer generator for tests, sync and async, with no model."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass

from citeformer.answers import ChunkTracker, StreamedAnswer, cited_answer
from citeformer.errors import InputTypeError, InvalidInputError, PromptTooLongError
from citeformer.request import GenerationRequest
from citeformer.types import CitedAnswer, FinishReason

Script = str | Sequence[str] | Callable[[GenerationRequest], str]
"""What a ``FakeGenerator`` answers: one text, a list of texts taken in turn, or a function of
the request."""

_WORD = re.compile(r"[^\W_]+")
_PIECE = re.compile(r"\s*\S+")


class FakeGenerator:
    """An answer generator that answers from a script instead of a model, for tests.

    It has what the framework wrappers and the command line need of a generator (``answer``,
    ``answer_stream``) and the async twins (``aanswer``, ``aanswer_stream``), so it stands in for
    a ``CiteGenerator`` or a ``ServerGenerator``. Every answer goes through
    ``citeformer.answers.cited_answer``, the check real answers get: a script that writes ``[7]``
    with three sources raises ``GrammarViolationError``, as an unenforced grammar would.

    The script's text is generated in pieces, one piece standing for one token: a word with the
    white space before it, or ``piece_chars`` characters at a time. An answer stops with finish
    reason ``"length"`` when the pieces reach the request's ``max_new_tokens`` or ``cut``, and its
    open marker is then dropped as the real generators drop it. Streams show text as a real stream
    does (a marker only once its ``]`` has arrived), and their chunks join to ``answer.text``.
    Token counts are counted in pieces and, for the prompt, in words.

    It answers every request from its script and measures no support: a script that writes the
    request's refusal sentence (``request.refusal.text``) gives an answer with ``abstained``
    true, standing in for a refused one.

    Instantiate:
        ```python
        from citeformer.testing import FakeGenerator

        fake = FakeGenerator()                              # "What is it [1]." for "What is it?"
        fake = FakeGenerator("Paris is in France [1].")     # the same answer every time
        fake = FakeGenerator(["It is Paris [1].", "It is Berlin [2]."])  # in turn, then again
        fake = FakeGenerator(lambda request: f"See the last source [{request.n_sources}].")
        fake = FakeGenerator(piece_chars=1, delay=0.01, cut=12)  # slow, cut after 12 pieces
        fake = FakeGenerator(context_length=512)            # PromptTooLongError past 512 words
        ```

    Use:
        ```python
        cite = CitationRunnable(generator=fake)             # or CitationSynthesizer(fake)
        cite.invoke({"question": "Capital of France?", "context": documents})
        fake.requests[-1].max_new_tokens                    # each GenerationRequest it got
        fake.streams[-1].finished                           # False: the reader left early
        CitationRunnable(generator=fake.sync_only())        # no async twins: a worker thread
        ```

    A stream (``fake.streams``) also tells how far it got: ``generated`` pieces so far,
    ``finished`` once read to the end, ``closed`` once it stopped, either way.
    """

    def __init__(
        self,
        script: Script | None = None,
        *,
        piece_chars: int | None = None,
        delay: float = 0.0,
        cut: int | None = None,
        context_length: int | None = None,
    ) -> None:
        """``script``: the answers (default: the question's words citing source 1).
        ``piece_chars``: characters per piece (default: one word per piece). ``delay``: seconds
        each piece takes. ``cut``: most pieces per answer. ``context_length``: most words of
        prompt plus ``max_new_tokens`` a request may need, as a model's context window."""
        self._script = _checked_script(script)
        self.piece_chars = _at_least(1, "piece_chars", piece_chars)
        self.cut = _at_least(0, "cut", cut)
        self.context_length = _at_least(1, "context_length", context_length)
        if isinstance(delay, bool) or not isinstance(delay, (int, float)) or not delay >= 0:
            raise InvalidInputError(f"delay must be a number of seconds >= 0, got {delay!r}")
        self.delay = float(delay)
        self.requests: list[GenerationRequest] = []
        """Every request received, in order."""
        self.streams: list[FakeStream | AsyncFakeStream] = []
        """Every stream returned, in order."""
        self._lock = threading.Lock()

    def answer(self, request: GenerationRequest) -> CitedAnswer:
        """The scripted answer to ``request``, after ``delay`` seconds per piece."""
        plan = self._plan(request)
        time.sleep(self.delay * len(plan.pieces))
        return plan.answer("".join(plan.pieces))

    async def aanswer(self, request: GenerationRequest) -> CitedAnswer:
        """Async ``answer``: the delay is awaited, so the event loop runs on meanwhile."""
        plan = self._plan(request)
        await asyncio.sleep(self.delay * len(plan.pieces))
        return plan.answer("".join(plan.pieces))

    def answer_stream(self, request: GenerationRequest) -> FakeStream:
        """The scripted answer as a stream of text chunks; ``.answer`` once read to the end."""
        stream = FakeStream(self._plan(request), self.delay)
        self.streams.append(stream)
        return stream

    def aanswer_stream(self, request: GenerationRequest) -> AsyncFakeStream:
        """Async ``answer_stream``: ``async for chunk in ...``, then ``.answer``."""
        stream = AsyncFakeStream(self._plan(request), self.delay)
        self.streams.append(stream)
        return stream

    def sync_only(self) -> SyncFakeGenerator:
        """This generator without ``aanswer``/``aanswer_stream``, as a model in this process is:
        the framework wrappers then run it in a worker thread. It records into this one."""
        return SyncFakeGenerator(self)

    def _plan(self, request: GenerationRequest) -> _Plan:
        # Recording and picking the script's text together, so that requests answered from
        # several threads still take the texts of a list in turn.
        with self._lock:
            self.requests.append(request)
            text = self._text(request, len(self.requests) - 1)
        prompt_tokens = _prompt_words(request)
        if self.context_length is not None and (
            prompt_tokens + request.max_new_tokens > self.context_length
        ):
            raise PromptTooLongError(
                f"the prompt is {prompt_tokens} tokens (words) and max_new_tokens is "
                f"{request.max_new_tokens}, but the FakeGenerator's context holds "
                f"{self.context_length}; pass fewer or shorter sources, or a smaller "
                "max_new_tokens"
            )
        pieces = _pieces(text, self.piece_chars)
        budget = request.max_new_tokens
        if self.cut is not None:
            budget = min(budget, self.cut)
        # As with a model, the end-of-sequence token needs a place in the budget too.
        finish: FinishReason = "stop" if len(pieces) < budget else "length"
        return _Plan(request, pieces[:budget], finish, prompt_tokens)

    def _text(self, request: GenerationRequest, index: int) -> str:
        if callable(self._script):
            text = self._script(request)
            if not isinstance(text, str):
                raise InputTypeError(
                    f"the FakeGenerator's script returned a {type(text).__name__}, not the "
                    "answer text as a str"
                )
            return text
        if isinstance(self._script, str):
            return self._script
        return self._script[index % len(self._script)]


class SyncFakeGenerator:
    """A ``FakeGenerator`` seen without its async twins (``FakeGenerator.sync_only()``)."""

    def __init__(self, fake: FakeGenerator) -> None:
        self.fake = fake
        """The generator that answers, and records the requests and streams."""

    @property
    def context_length(self) -> int | None:
        """The fake's ``context_length``."""
        return self.fake.context_length

    def answer(self, request: GenerationRequest) -> CitedAnswer:
        """``FakeGenerator.answer``."""
        return self.fake.answer(request)

    def answer_stream(self, request: GenerationRequest) -> FakeStream:
        """``FakeGenerator.answer_stream``."""
        return self.fake.answer_stream(request)


class FakeStream(StreamedAnswer):
    """The stream ``FakeGenerator.answer_stream`` returns: iterate once, then read ``answer``."""

    def __init__(self, plan: _Plan, delay: float) -> None:
        super().__init__()
        self._plan = plan
        self._delay = delay
        self.generated = 0
        """Pieces generated so far."""
        self.finished = False
        """Whether the stream was read to the end."""
        self.closed = False
        """Whether the stream has stopped: read to the end, or left early."""

    def __iter__(self) -> Iterator[str]:
        self._start()
        return self._chunks()

    def _chunks(self) -> Iterator[str]:
        shown = ChunkTracker(quotes=self._plan.request.quotable_chars is not None)
        text = ""
        try:
            for piece in self._plan.pieces:
                time.sleep(self._delay)
                text += piece
                self.generated += 1
                if chunk := shown.update(text):
                    yield chunk
            self._answer = self._plan.answer(text)
            if rest := shown.rest(self._answer):
                yield rest
            self.finished = True
        finally:
            self.closed = True


class AsyncFakeStream(StreamedAnswer):
    """The stream ``FakeGenerator.aanswer_stream`` returns: ``async for`` once, then ``answer``."""

    def __init__(self, plan: _Plan, delay: float) -> None:
        super().__init__()
        self._plan = plan
        self._delay = delay
        self.generated = 0
        """Pieces generated so far."""
        self.finished = False
        """Whether the stream was read to the end."""
        self.closed = False
        """Whether the stream has stopped: read to the end, or left early."""

    def __aiter__(self) -> AsyncIterator[str]:
        self._start()
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[str]:
        shown = ChunkTracker(quotes=self._plan.request.quotable_chars is not None)
        text = ""
        try:
            for piece in self._plan.pieces:
                await asyncio.sleep(self._delay)
                text += piece
                self.generated += 1
                if chunk := shown.update(text):
                    yield chunk
            self._answer = self._plan.answer(text)
            if rest := shown.rest(self._answer):
                yield rest
            self.finished = True
        finally:
            self.closed = True


@dataclass(frozen=True)
class _Plan:
    """One request's scripted answer: the pieces to generate and how the answer ends."""

    request: GenerationRequest
    pieces: list[str]
    finish: FinishReason
    prompt_tokens: int

    def answer(self, text: str) -> CitedAnswer:
        # Counted like a model's tokens: the end-of-sequence token is one when the answer stops.
        generated = len(self.pieces) + (1 if self.finish == "stop" else 0)
        return cited_answer(
            self.request, text, self.finish,
            prompt_tokens=self.prompt_tokens, generated_tokens=generated,
        )


def _echo_question(request: GenerationRequest) -> str:
    """The default script: the question's words, citing source 1 (``"What is it [1]."``)."""
    words = _WORD.findall(request.question)
    return f"{' '.join(words) or 'Answer'} [1]."


def _checked_script(script: Script | None) -> Script:
    if script is None:
        return _echo_question
    if isinstance(script, str) or callable(script):
        return script
    if isinstance(script, Sequence):
        texts = list(script)
        if not texts:
            raise InvalidInputError(
                "the FakeGenerator's script is an empty list; give at least one answer text"
            )
        odd = next((t for t in texts if not isinstance(t, str)), None)
        if odd is not None:
            raise InputTypeError(
                f"the FakeGenerator's script holds {odd!r} of type {type(odd).__name__}; "
                "every answer in the list must be a str"
            )
        return texts
    raise InputTypeError(
        f"the FakeGenerator's script must be a str, a list of str or a function of the request, "
        f"got {type(script).__name__}"
    )


def _at_least(low: int, name: str, value: int | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise InvalidInputError(f"{name} must be an int >= {low} or None, got {value!r}")
    return value


def _pieces(text: str, piece_chars: int | None) -> list[str]:
    if piece_chars is not None:
        return [text[i:i + piece_chars] for i in range(0, len(text), piece_chars)]
    pieces = _PIECE.findall(text)
    # White space after the last word (rare in a script) stays with that word.
    if pieces and len("".join(pieces)) < len(text):
        pieces[-1] += text[len("".join(pieces)):]
    return pieces


def _prompt_words(request: GenerationRequest) -> int:
    if request.prompt is not None:
        return len(request.prompt.split())
    return sum(len(message["content"].split()) for message in request.messages())
