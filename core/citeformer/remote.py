"""Cited answers from a model served over an OpenAI-compatible HTTP API, its grammar enforced there.

``ServerGenerator`` builds the same prompt and the same GBNF grammar as ``CiteGenerator`` and sends
the grammar with each request in the field the serving engine reads; the engine's own grammar
backend masks every token. The answer is then scanned again here: a server that ignored the
grammar (a marker outside 1..N) raises ``ServerIgnoredGrammarError`` instead of reaching the user.

Where each engine reads the grammar (chat and text completions alike):

- llama.cpp via llama-cpp-python's server: ``"grammar": "<GBNF>"``, a field of both
  ``CreateCompletionRequest`` and ``CreateChatCompletionRequest``
  (abetlen/llama-cpp-python, ``llama_cpp/server/types.py``; ``llama_cpp/server/app.py`` turns it
  into ``LlamaGrammar.from_string``). llama.cpp's own ``llama-server`` reads the same field.
- vLLM: ``"structured_outputs": {"grammar": "<GBNF>"}``; releases before v0.12.0 read
  ``"guided_grammar": "<GBNF>"`` instead, removed in v0.12.0
  (https://docs.vllm.ai/en/latest/features/structured_outputs/).
- SGLang: ``"ebnf": "<GBNF>"`` (https://docs.sglang.io/advanced_features/structured_outputs.html;
  ``ebnf`` in sgl-project/sglang ``python/sglang/srt/entrypoints/openai/protocol.py``). Its
  default backend, XGrammar, reads llama.cpp's GBNF dialect, the one ``build_grammar`` writes.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

import httpx

from citeformer.answers import (
    DEFAULT_MAX_NEW_TOKENS,
    ChunkTracker,
    SourceLike,
    StreamedAnswer,
    bad_markers,
    check_decoding,
    check_question,
    cited_answer,
    normalize_sources,
    quotable_chars,
)
from citeformer.errors import (
    GrammarViolationError,
    InvalidInputError,
    ServerConnectionError,
    ServerIgnoredGrammarError,
    ServerResponseError,
)
from citeformer.grammar import build_grammar, grammar_options
from citeformer.prompt import build_messages
from citeformer.sse import asse_events, sse_events
from citeformer.types import CitedAnswer, FinishReason, Policy, Source

Engine = Literal["llama.cpp", "vllm", "vllm-guided", "sglang"]
ENGINES: tuple[str, ...] = ("llama.cpp", "vllm", "vllm-guided", "sglang")
"""``vllm-guided``: vLLM releases before v0.12.0, which read ``guided_grammar``."""

API_KEY_VARIABLES = ("CITEFORMER_API_KEY", "OPENAI_API_KEY")
DEFAULT_TIMEOUT_S = 120.0
DEFAULT_MAX_RETRIES = 2
DEFAULT_RETRY_BACKOFF_S = 0.5
# Busy or restarting servers and load balancers answer these; trying again is what helps.
_RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
_MAX_BACKOFF_S = 8.0


class ServerGenerator:
    """Answers a question from numbered sources through a serving engine's OpenAI-compatible API;
    every ``[k]`` it returns has 1 <= k <= len(sources).

    The same interface and results as ``CiteGenerator``: ``generate`` and ``stream`` (and the
    async twins ``agenerate`` and ``astream``) take the same arguments and return the same
    ``CitedAnswer``. The grammar is enforced by the engine (llama.cpp, vLLM, SGLang); citeformer
    checks every marker of the result again and raises ``ServerIgnoredGrammarError`` on one
    outside 1..N.

    Setup::

        python -m llama_cpp.server --model model.gguf --port 8080     # or vLLM, SGLang

    Instantiate::

        from citeformer import ServerGenerator
        gen = ServerGenerator("http://localhost:8080")                   # llama.cpp server
        gen = ServerGenerator("http://vllm:8000/v1", "Qwen/Qwen2.5-7B-Instruct", engine="vllm")
        gen = ServerGenerator("http://sglang:30000", engine="sglang", timeout=30)

    Invoke::

        answer = gen.generate("What is the capital of France?",
                              ["Paris is the capital of France.", "Berlin is in Germany."])
        answer.text        # 'Paris is the capital of France [1].'

    Stream::

        stream = gen.stream(question, sources)
        for chunk in stream:          # a marker arrives whole
            print(chunk, end="")
        stream.answer                 # the CitedAnswer, once the loop ends

    Async::

        answer = await gen.agenerate(question, sources)
        stream = gen.astream(question, sources)
        async for chunk in stream: ...
    """

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        *,
        engine: Engine | str = "llama.cpp",
        api_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        max_retries: int = DEFAULT_MAX_RETRIES,
        retry_backoff: float = DEFAULT_RETRY_BACKOFF_S,
        context_length: int | None = None,
        headers: dict[str, str] | None = None,
        transport: Any = None,
    ) -> None:
        """Point at the server at ``base_url`` (with or without its ``/v1``).

        ``model``: the served model's name; ``None`` asks the server (``GET /v1/models``) on first
        use and takes the first. ``engine``: ``"llama.cpp"``, ``"vllm"``, ``"vllm-guided"`` (vLLM
        before v0.12.0) or ``"sglang"``, which decides the request field the grammar travels in.
        ``api_key``: sent as ``Authorization: Bearer``; default ``$CITEFORMER_API_KEY``, else
        ``$OPENAI_API_KEY``, else none. ``timeout``: seconds for connecting and between two
        received chunks. ``max_retries``: further attempts after a connection error or a
        408/429/5xx answer, waiting ``retry_backoff * 2**attempt`` seconds (with jitter) or the
        server's ``Retry-After``. A request is never retried once the answer has started to
        arrive. ``context_length``: the served model's context, if you want wrappers to know it.
        ``transport``: an ``httpx`` transport, for tests (``httpx.MockTransport``).
        """
        self.base_url = _api_root(base_url)
        if engine not in ENGINES:
            raise InvalidInputError(
                f"unknown engine {engine!r}; use one of: {', '.join(ENGINES)}"
            )
        self.engine: str = engine
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise ValueError(f"max_retries must be an int >= 0, got {max_retries!r}")
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout!r}")
        self.timeout = float(timeout)
        self.max_retries = max_retries
        self.retry_backoff = float(retry_backoff)
        self.context_length = context_length
        self._model = model
        key = api_key if api_key is not None else _api_key_from_env()
        self._headers = {"Accept": "application/json", **(headers or {})}
        if key:
            self._headers["Authorization"] = f"Bearer {key}"
        self._transport = transport
        self._client: httpx.Client | None = None
        self._client_lock = threading.Lock()

    def __repr__(self) -> str:
        return (
            f"ServerGenerator({self.base_url!r}, {self._model!r}, engine={self.engine!r})"
        )

    # -- connection ----------------------------------------------------------------------------

    @property
    def model(self) -> str | None:
        """The served model's name, once given or asked of the server."""
        return self._model

    def check(self) -> str:
        """Ask the server which model it serves (``GET /v1/models``); return the name in use.

        Raises ``ServerConnectionError`` if it cannot be reached, ``ServerResponseError`` if it
        answers with an error.
        """
        response = self._send("GET", "/models", None)
        name = _first_model(response, self.base_url)
        if self._model is None:
            self._model = name
        return self._model

    async def acheck(self) -> str:
        """Async ``check``."""
        async with self._async_client() as client:
            response = await self._asend(client, "GET", "/models", None)
        name = _first_model(response, self.base_url)
        if self._model is None:
            self._model = name
        return self._model

    def close(self) -> None:
        """Close the pooled connections (also done on leaving a ``with`` block)."""
        with self._client_lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    def __enter__(self) -> ServerGenerator:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- the request ---------------------------------------------------------------------------

    def _grammar(
        self, sources: Sequence[Source], policy: Policy, options: dict[str, int | bool]
    ) -> str:
        """The grammar sent with a request: the one ``CiteGenerator`` enforces for the call.

        Under ``QUOTES_ONLY`` with verbatim quotes (the default) it spells out, as GBNF rules,
        the quotes each source allows; locally ``QuoteGuard`` enforces the same automaton.
        """
        verbatim = policy is Policy.QUOTES_ONLY and options.get("verbatim_quotes", True)
        quote_sources = sources if verbatim else None
        return build_grammar(  # the options were checked by grammar_options
            len(sources), policy, quote_sources=quote_sources, **options  # type: ignore[arg-type]
        )

    def request_body(
        self,
        question: str,
        sources: Sequence[SourceLike],
        policy: Policy | str = Policy.REQUIRED,
        *,
        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
        do_sample: bool = False,
        temperature: float = 1.0,
        seed: int | None = None,
        instructions: str | None = None,
        prompt: str | None = None,
        constrained: bool = True,
        stream: bool = False,
        **grammar_opts: int | bool,
    ) -> dict[str, Any]:
        """The JSON body ``generate`` (or, with ``stream=True``, ``stream``) would send.

        Chat completions carry the messages of ``citeformer.prompt.build_messages``; with
        ``prompt`` (text you rendered yourself) the body is a text completion's instead.
        """
        call = self._prepare(
            question, sources, policy, max_new_tokens, do_sample, temperature, seed,
            instructions, prompt, constrained, grammar_opts, stream,
        )
        return call.body

    def _prepare(
        self,
        question: str,
        sources: Sequence[SourceLike],
        policy: Policy | str,
        max_new_tokens: int,
        do_sample: bool,
        temperature: float,
        seed: int | None,
        instructions: str | None,
        prompt: str | None,
        constrained: bool,
        grammar_opts: dict[str, int | bool],
        stream: bool,
    ) -> _Call:
        # The same checks, in the same order, as CiteGenerator._prepare.
        question = check_question(question)
        normalized = normalize_sources(sources)
        policy = Policy.coerce(policy)
        check_decoding(max_new_tokens, do_sample, temperature)
        if grammar_opts.pop("evidence", None) is not None:
            raise InvalidInputError(
                "evidence= reweights the model's logits, which a serving engine does not expose; "
                "it works with CiteGenerator only: drop it for a ServerGenerator"
            )
        options = grammar_options(grammar_opts)
        body: dict[str, Any] = {}
        if self._model is not None:
            body["model"] = self._model
        if prompt is None:
            path = "/chat/completions"
            body["messages"] = build_messages(question, normalized, policy, instructions)
        else:
            path = "/completions"
            body["prompt"] = prompt
        body["max_tokens"] = max_new_tokens
        # Greedy is temperature 0 on all three engines; sampling uses the whole distribution,
        # as CiteGenerator does (top_p 1).
        body["temperature"] = float(temperature) if do_sample else 0.0
        if do_sample:
            body["top_p"] = 1.0
        if self.engine == "llama.cpp":
            # llama-cpp-python's server defaults to repeat_penalty 1.1, top_k 40 and min_p 0.05
            # (llama_cpp/server/types.py); CiteGenerator applies none of them.
            body["repeat_penalty"] = 1.0
            if do_sample:
                body.update(top_k=0, min_p=0.0)
        if seed is not None:
            body["seed"] = seed
        if stream:
            body["stream"] = True
            # Token counts in a last chunk (OpenAI's stream_options): vLLM and SGLang send it,
            # llama-cpp-python's server ignores the field.
            body["stream_options"] = {"include_usage": True}
        if constrained:
            body.update(_grammar_field(self.engine, self._grammar(normalized, policy, options)))
        quotable = quotable_chars(policy, constrained, options)
        return _Call(normalized, path, body, constrained, quotable)

    # -- generate ------------------------------------------------------------------------------

    def generate(
        self,
        question: str,
        sources: Sequence[SourceLike],
        policy: Policy | str = Policy.REQUIRED,
        *,
        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
        do_sample: bool = False,
        temperature: float = 1.0,
        seed: int | None = None,
        instructions: str | None = None,
        prompt: str | None = None,
        constrained: bool = True,
        **grammar_opts: int | bool,
    ) -> CitedAnswer:
        """Answer ``question`` from ``sources``, as ``CiteGenerator.generate`` does.

        ``prompt`` replaces the chat messages with text you rendered yourself (sent to
        ``/v1/completions``). ``constrained=False`` sends no grammar, for comparisons only.
        Raises ``ServerIgnoredGrammarError`` if a constrained answer holds a marker outside
        1..len(sources), ``ServerConnectionError`` or ``ServerResponseError`` if the server
        cannot answer.
        """
        call = self._prepare(
            question, sources, policy, max_new_tokens, do_sample, temperature, seed,
            instructions, prompt, constrained, grammar_opts, False,
        )
        self._resolve_model()
        _name_model(call, self._model)
        data = _json(self._send("POST", call.path, call.body), self.base_url)
        return _completed(call, data, self.base_url)

    async def agenerate(
        self,
        question: str,
        sources: Sequence[SourceLike],
        policy: Policy | str = Policy.REQUIRED,
        *,
        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
        do_sample: bool = False,
        temperature: float = 1.0,
        seed: int | None = None,
        instructions: str | None = None,
        prompt: str | None = None,
        constrained: bool = True,
        **grammar_opts: int | bool,
    ) -> CitedAnswer:
        """Async ``generate``."""
        call = self._prepare(
            question, sources, policy, max_new_tokens, do_sample, temperature, seed,
            instructions, prompt, constrained, grammar_opts, False,
        )
        async with self._async_client() as client:
            await self._aresolve_model(client)
            _name_model(call, self._model)
            response = await self._asend(client, "POST", call.path, call.body)
        return _completed(call, _json(response, self.base_url), self.base_url)

    # -- stream --------------------------------------------------------------------------------

    def stream(
        self,
        question: str,
        sources: Sequence[SourceLike],
        policy: Policy | str = Policy.REQUIRED,
        *,
        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
        do_sample: bool = False,
        temperature: float = 1.0,
        seed: int | None = None,
        instructions: str | None = None,
        prompt: str | None = None,
        constrained: bool = True,
        **grammar_opts: int | bool,
    ) -> ServerAnswerStream:
        """Like ``generate``, but an iterator of text chunks as the server sends them (SSE).

        As with ``CiteGenerator.stream``, a marker is held back until its ``]`` arrives and the
        chunks join to ``stream.answer.text``; a marker outside 1..N raises before it is
        yielded. A connection lost mid-answer raises ``ServerConnectionError`` and leaves no
        ``answer``. Arguments are checked before this returns. Token counts are those of the
        stream's last ``usage`` event; a server that sends none (llama-cpp-python's) leaves
        ``prompt_tokens`` at 0 and ``generated_tokens`` counts the text pieces received.
        """
        call = self._prepare(
            question, sources, policy, max_new_tokens, do_sample, temperature, seed,
            instructions, prompt, constrained, grammar_opts, True,
        )
        return ServerAnswerStream(self, call)

    def astream(
        self,
        question: str,
        sources: Sequence[SourceLike],
        policy: Policy | str = Policy.REQUIRED,
        *,
        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
        do_sample: bool = False,
        temperature: float = 1.0,
        seed: int | None = None,
        instructions: str | None = None,
        prompt: str | None = None,
        constrained: bool = True,
        **grammar_opts: int | bool,
    ) -> AsyncServerAnswerStream:
        """Async ``stream``: ``async for chunk in gen.astream(...)``, then ``.answer``."""
        call = self._prepare(
            question, sources, policy, max_new_tokens, do_sample, temperature, seed,
            instructions, prompt, constrained, grammar_opts, True,
        )
        return AsyncServerAnswerStream(self, call)

    # -- HTTP ----------------------------------------------------------------------------------

    def _sync_client(self) -> httpx.Client:
        # One pooled client for all threads (httpx.Client is thread-safe), made on first use.
        with self._client_lock:
            if self._client is None:
                self._client = httpx.Client(
                    base_url=self.base_url, headers=self._headers, timeout=self.timeout,
                    transport=self._transport,
                )
            return self._client

    def _async_client(self) -> httpx.AsyncClient:
        # One client per call: an AsyncClient belongs to the event loop it was first used on.
        return httpx.AsyncClient(
            base_url=self.base_url, headers=self._headers, timeout=self.timeout,
            transport=self._transport,
        )

    def _resolve_model(self) -> None:
        if self._model is None:
            self.check()

    async def _aresolve_model(self, client: httpx.AsyncClient) -> None:
        if self._model is None:
            response = await self._asend(client, "GET", "/models", None)
            self._model = _first_model(response, self.base_url)

    def _send(
        self, method: str, path: str, body: dict[str, Any] | None, *, stream: bool = False
    ) -> httpx.Response:
        """Send with retries; the response is read unless ``stream`` (then the caller closes)."""
        client = self._sync_client()
        attempt = 0
        while True:
            try:
                request = client.build_request(method, path, json=body)
                response = client.send(request, stream=True)
            except httpx.TransportError as error:
                if attempt >= self.max_retries or not _retryable_error(error):
                    raise _connection_error(error, self.base_url, attempt) from error
                time.sleep(self._backoff(attempt, None))
                attempt += 1
                continue
            if response.status_code < 400 and stream:
                return response
            try:
                response.read()
            except httpx.TransportError as error:
                response.close()
                raise _connection_error(error, self.base_url, attempt) from error
            finally:
                response.close()
            if response.status_code >= 400:
                if attempt < self.max_retries and response.status_code in _RETRY_STATUS:
                    time.sleep(self._backoff(attempt, response))
                    attempt += 1
                    continue
                raise _response_error(response, self.base_url, attempt)
            return response

    async def _asend(
        self,
        client: httpx.AsyncClient,
        method: str,
        path: str,
        body: dict[str, Any] | None,
        *,
        stream: bool = False,
    ) -> httpx.Response:
        attempt = 0
        while True:
            try:
                request = client.build_request(method, path, json=body)
                response = await client.send(request, stream=True)
            except httpx.TransportError as error:
                if attempt >= self.max_retries or not _retryable_error(error):
                    raise _connection_error(error, self.base_url, attempt) from error
                await asyncio.sleep(self._backoff(attempt, None))
                attempt += 1
                continue
            if response.status_code < 400 and stream:
                return response
            try:
                await response.aread()
            except httpx.TransportError as error:
                raise _connection_error(error, self.base_url, attempt) from error
            finally:
                await response.aclose()
            if response.status_code >= 400:
                if attempt < self.max_retries and response.status_code in _RETRY_STATUS:
                    await asyncio.sleep(self._backoff(attempt, response))
                    attempt += 1
                    continue
                raise _response_error(response, self.base_url, attempt)
            return response

    def _backoff(self, attempt: int, response: httpx.Response | None) -> float:
        if response is not None:
            after = response.headers.get("Retry-After", "")
            if after.replace(".", "", 1).isdigit():
                return min(float(after), _MAX_BACKOFF_S)
        delay = self.retry_backoff * (2**attempt)
        return min(delay * (0.75 + random.random() / 2), _MAX_BACKOFF_S)


class ServerAnswerStream(StreamedAnswer):
    """Text chunks of one answer as the server sends them; ``answer`` holds the result at the end.

    The request is sent when iteration starts; leaving the loop early closes the connection, which
    makes the engine stop generating.
    """

    def __init__(self, generator: ServerGenerator, call: _Call) -> None:
        super().__init__()
        self._generator = generator
        self._call = call

    def __iter__(self) -> Iterator[str]:
        self._start()
        return self._chunks()

    def _chunks(self) -> Iterator[str]:
        generator = self._generator
        generator._resolve_model()
        _name_model(self._call, generator.model)
        base_url = generator.base_url
        response = generator._send("POST", self._call.path, self._call.body, stream=True)
        assembler = _Assembler(self._call, base_url)
        try:
            events = sse_events(response.iter_lines())
            for event in events:
                if (chunk := assembler.feed(event)) is not None:
                    yield chunk
        except httpx.TransportError as error:
            raise assembler.lost(error) from error
        finally:
            response.close()
        answer, rest = assembler.finish()
        self._answer = answer
        if rest:
            yield rest


class AsyncServerAnswerStream(StreamedAnswer):
    """Async ``ServerAnswerStream``: ``async for chunk in stream``, then ``stream.answer``."""

    def __init__(self, generator: ServerGenerator, call: _Call) -> None:
        super().__init__()
        self._generator = generator
        self._call = call

    def __aiter__(self) -> AsyncIterator[str]:
        self._start()
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[str]:
        generator = self._generator
        base_url = generator.base_url
        async with generator._async_client() as client:
            await generator._aresolve_model(client)
            _name_model(self._call, generator.model)
            response = await generator._asend(
                client, "POST", self._call.path, self._call.body, stream=True
            )
            assembler = _Assembler(self._call, base_url)
            try:
                async for event in asse_events(response.aiter_lines()):
                    if (chunk := assembler.feed(event)) is not None:
                        yield chunk
            except httpx.TransportError as error:
                raise assembler.lost(error) from error
            finally:
                await response.aclose()
        answer, rest = assembler.finish()
        self._answer = answer
        if rest:
            yield rest


@dataclass(frozen=True)
class _Call:
    sources: tuple[Source, ...]
    path: str
    body: dict[str, Any]
    constrained: bool
    quotable_chars: int | None = None
    """Set when quotes must be verbatim (``QUOTES_ONLY``): how much of each source they use."""


class _Assembler:
    """Turns the events of one streamed completion into visible chunks, then the answer."""

    def __init__(self, call: _Call, base_url: str) -> None:
        self._call = call
        self._base_url = base_url
        self._text = ""
        self._shown = ChunkTracker(quotes=call.quotable_chars is not None)
        self._pieces = 0
        self._finish: str | None = None
        self._usage: dict[str, Any] = {}
        self._done = False

    def feed(self, event: dict[str, Any] | None) -> str | None:
        """Take one SSE event (``None`` for ``[DONE]``); return new text the stream may show."""
        if event is None:
            self._done = True
            return None
        if "error" in event:
            raise ServerResponseError(
                f"the server at {self._base_url} reported an error mid-answer: "
                f"{_error_message(event)}",
                status_code=200, body=json.dumps(event),
            )
        if isinstance(event.get("usage"), dict):
            self._usage = event["usage"]
        for choice in event.get("choices") or ():
            piece = _choice_text(choice, delta=True)
            if piece:
                self._text += piece
                self._pieces += 1
            if choice.get("finish_reason"):
                self._finish = choice["finish_reason"]
        chunk = self._shown.update(self._text)
        if chunk is not None and self._call.constrained:
            bad = bad_markers(self._shown.emitted, len(self._call.sources), finished=False)
            if bad:
                raise _ignored_marker(self._base_url, len(self._call.sources))(bad[0], self._text)
        return chunk

    def lost(self, error: Exception) -> ServerConnectionError:
        return ServerConnectionError(
            f"the connection to {self._base_url} was lost mid-answer, after "
            f"{len(self._text)} characters ({type(error).__name__}: {error}); the answer is "
            "incomplete and was not returned"
        )

    def finish(self) -> tuple[CitedAnswer, str]:
        if self._finish is None:
            # No finish reason: the stream ended without the engine finishing the answer.
            raise ServerConnectionError(
                f"the stream from {self._base_url} ended after {len(self._text)} characters "
                f"without a finish reason{'' if self._done else ' or [DONE]'}; the answer is "
                "incomplete and was not returned"
            )
        usage = self._usage
        answer = _answer(
            self._call, self._text, self._finish, self._base_url,
            prompt_tokens=usage.get("prompt_tokens"),
            generated_tokens=usage.get("completion_tokens", self._pieces),
        )
        return answer, self._shown.rest(answer)


def _name_model(call: _Call, model: str | None) -> None:
    if model is not None and "model" not in call.body:
        call.body["model"] = model


def _completed(call: _Call, data: Any, base_url: str) -> CitedAnswer:
    choices = data.get("choices") if isinstance(data, dict) else None
    if not choices or not isinstance(choices[0], dict):
        raise ServerResponseError(
            f"the server at {base_url} answered without choices: {json.dumps(data)[:500]}",
            status_code=200, body=json.dumps(data),
        )
    choice = choices[0]
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    return _answer(
        call, _choice_text(choice, delta=False) or "", choice.get("finish_reason"), base_url,
        prompt_tokens=usage.get("prompt_tokens"),
        generated_tokens=usage.get("completion_tokens"),
    )


def _answer(
    call: _Call,
    text: str,
    finish_reason: str | None,
    base_url: str,
    *,
    prompt_tokens: Any,
    generated_tokens: Any,
) -> CitedAnswer:
    finish: FinishReason
    if finish_reason == "length":
        finish = "length"
    elif finish_reason in ("stop", "eos", None):
        finish = "stop"
    else:
        raise ServerResponseError(
            f"the server at {base_url} ended the answer with finish_reason "
            f"{finish_reason!r} (neither 'stop' nor 'length'): {text!r}",
            status_code=200, body=text,
        )
    n = len(call.sources)
    try:
        return cited_answer(
            text, call.sources, finish, constrained=call.constrained,
            quotable=call.quotable_chars, prompt_tokens=int(prompt_tokens or 0),
            generated_tokens=int(generated_tokens or 0), violation=_ignored_marker(base_url, n),
        )
    except ServerIgnoredGrammarError:
        raise
    except GrammarViolationError as error:  # a quote the source does not hold
        raise ServerIgnoredGrammarError(
            f"the server at {base_url} returned a quote that is not verbatim ({error}): the "
            f"server ignored the citation grammar. The answer was not returned: {text!r}",
            marker=str(error),
        ) from error


def _ignored_marker(base_url: str, n: int) -> Callable[[str, str], ServerIgnoredGrammarError]:
    """The re-check that does not trust the server: a marker outside 1..n raises this."""

    def error(marker: str, text: str) -> ServerIgnoredGrammarError:
        return ServerIgnoredGrammarError(
            f"the server at {base_url} returned marker {marker!r}, which names no source in "
            f"1..{n}: the server ignored the citation grammar (check that the engine is right "
            "for this server, see ServerGenerator(engine=...), and that its grammar backend is "
            f"enabled). The answer was not returned: {text!r}",
            marker=marker,
        )

    return error


def _choice_text(choice: dict[str, Any], *, delta: bool) -> str | None:
    # Chat completions put text in message/delta.content, text completions in text.
    holder = choice.get("delta" if delta else "message")
    if isinstance(holder, dict) and isinstance(holder.get("content"), str):
        return holder["content"]
    text = choice.get("text")
    return text if isinstance(text, str) else None


def _grammar_field(engine: str, grammar: str) -> dict[str, Any]:
    if engine == "vllm":
        return {"structured_outputs": {"grammar": grammar}}
    if engine == "vllm-guided":
        return {"guided_grammar": grammar}
    if engine == "sglang":
        return {"ebnf": grammar}
    return {"grammar": grammar}


def _api_root(base_url: str) -> str:
    if not isinstance(base_url, str) or not base_url.strip():
        raise InvalidInputError(
            f"the server URL must be a non-empty string, got {base_url!r}; "
            "e.g. http://localhost:8080"
        )
    url = base_url.strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise InvalidInputError(
            f"{base_url!r} is not an http(s) URL; give the server's address with its scheme, "
            "e.g. http://localhost:8080 or https://llm.example.com/v1"
        )
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError as error:
        raise InvalidInputError(f"{base_url!r} has a bad port: {error}") from None
    return url if url.endswith("/v1") else f"{url}/v1"


def _api_key_from_env() -> str | None:
    for name in API_KEY_VARIABLES:
        if value := os.environ.get(name, "").strip():
            return value
    return None


def _retryable_error(error: httpx.TransportError) -> bool:
    # Nothing was generated yet when the connection could not be made or was refused; a read
    # timeout may mean the server is generating, so sending again would only pile up work.
    return isinstance(error, (httpx.ConnectError, httpx.ConnectTimeout, httpx.RemoteProtocolError))


def _connection_error(error: Exception, base_url: str, retries: int) -> ServerConnectionError:
    tried = f" (after {retries + 1} attempts)" if retries else ""
    reason = str(error) or type(error).__name__
    if isinstance(error, httpx.TimeoutException):
        reason = f"no answer within the timeout ({type(error).__name__})"
    return ServerConnectionError(
        f"could not reach the server at {base_url}{tried}: {reason}; check that it is running "
        "and that the URL is right"
    )


def _response_error(response: httpx.Response, base_url: str, retries: int) -> ServerResponseError:
    body = response.text
    try:
        message = _error_message(response.json())
    except (json.JSONDecodeError, ValueError):
        message = body.strip()[:1000] or "(empty body)"
    tried = f" (after {retries + 1} attempts)" if retries else ""
    hint = ""
    if response.status_code in (400, 422) and any(
        word in message.lower() for word in ("grammar", "ebnf", "structured", "guided")
    ):
        hint = (
            " The server rejected the grammar request: check the engine "
            "(ServerGenerator(engine=...): 'llama.cpp', 'vllm', 'vllm-guided' or 'sglang')."
        )
    elif response.status_code in (401, 403):
        hint = " Set the API key (api_key=..., or $CITEFORMER_API_KEY / $OPENAI_API_KEY)."
    elif response.status_code == 404:
        hint = " Check the URL (the server's OpenAI-compatible root, e.g. http://host:8080/v1)."
    return ServerResponseError(
        f"the server at {base_url} answered {response.status_code} "
        f"{response.reason_phrase or ''}{tried} to {response.request.method} "
        f"{response.request.url.path}: {message.rstrip('.')}.{hint}",
        status_code=response.status_code,
        body=body,
    )


def _error_message(data: Any) -> str:
    # OpenAI's shape is {"error": {"message": ...}}; FastAPI's validation errors are
    # {"detail": [...]}; some engines send {"error": "..."} or {"message": ...}.
    if isinstance(data, dict):
        error = data.get("error", data)
        if isinstance(error, dict):
            for key in ("message", "detail", "msg"):
                if key in error:
                    value = error[key]
                    return value if isinstance(value, str) else json.dumps(value)[:1000]
        if isinstance(error, str):
            return error
    return json.dumps(data)[:1000]


def _json(response: httpx.Response, base_url: str) -> Any:
    try:
        return response.json()
    except (json.JSONDecodeError, ValueError) as error:
        raise ServerResponseError(
            f"the server at {base_url} answered with something that is not JSON: "
            f"{response.text[:300]!r}",
            status_code=response.status_code, body=response.text,
        ) from error


def _first_model(response: httpx.Response, base_url: str) -> str:
    data = _json(response, base_url)
    models = data.get("data") if isinstance(data, dict) else None
    if not models or not isinstance(models[0], dict) or not models[0].get("id"):
        raise ServerResponseError(
            f"the server at {base_url} lists no model at GET /v1/models; pass model=...",
            status_code=response.status_code, body=response.text,
        )
    return str(models[0]["id"])
