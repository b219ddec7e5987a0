"""``ServerGenerator``: cited answers from a serving engine, its grammar enforced there."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from citeformer.answers import WholeAnswer
from citeformer.decoding.payload import HANDSHAKE, HANDSHAKE_REPLY, PAYLOAD_KEY
from citeformer.errors import InvalidInputError, ServerResponseError
from citeformer.request import DEFAULT_POLICY, GenerationRequest, SourceLike, build_request
from citeformer.server._assemble import body_limit, completed
from citeformer.server._engines import Engine, ServerCall, check_engine, prepare_call
from citeformer.server._streams import AsyncServerAnswerStream, ServerAnswerStream
from citeformer.server._transport import (
    DEFAULT_MAX_RETRIES,
    DEFAULT_RETRY_BACKOFF_S,
    DEFAULT_TIMEOUT_S,
    Deadline,
    Transport,
    check_deadline,
)
from citeformer.types import CitedAnswer, Policy

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from citeformer.request import GenerationOptions

__all__ = ["STEERING_ENGINES", "ServerGenerator"]

logger = logging.getLogger("citeformer.server")

STEERING_ENGINES = ("vllm",)
"""The engines that run citeformer's steering processor (``citeformer.vllm``)."""
_HANDSHAKE_LIMIT_BYTES = 1 << 16


class ServerGenerator:
    """Answers from numbered sources through a serving engine's OpenAI-compatible API.

    Every ``[k]`` it returns has 1 <= k <= len(sources). The same interface and results as
    ``CiteGenerator``: ``generate`` and ``stream`` (and ``agenerate``, ``astream``) take the
    same arguments and return the same ``CitedAnswer``; ``answer`` and ``answer_stream`` (and
    ``aanswer``, ``aanswer_stream``) take a ``GenerationRequest``. The engine (llama.cpp, vLLM,
    SGLang) enforces the grammar; citeformer does not take its word for it: the answer is parsed
    again here against the very grammar that was sent (a whole answer, or a prefix when
    ``max_new_tokens`` cut it), its markers and quotes are checked, and anything else raises
    ``ServerIgnoredGrammarError`` before it is returned or, streaming, shown. A body that is not
    one completion, or an answer longer than ``max_new_tokens`` can produce, raises
    ``ServerResponseError``.

    Steering (vLLM): a vLLM started with ``--logits-processors citeformer.vllm:SteeringProcessor``
    runs citeformer's steering inside the engine, as ``CiteGenerator`` does in process: the
    request's own grammar, evidence-chosen ids and every readability lever. With
    ``engine="vllm"`` the generator asks the server once (``steers()``) and then sends the
    steering payload with each request. A vLLM without the processor gets the grammar alone
    (every marker in range, the prose unsteered, as llama.cpp and SGLang servers always do), and
    the generator logs a warning saying so; ``steers()`` tells which, ``steering=True`` makes a
    missing processor an error, ``steering=False`` never steers.

    Retries: a connection error before any answer, or an answer 408, 429 or 5xx, is tried again
    up to ``max_retries`` times, never once an answer has started to arrive. Retry ``a`` (from
    0) waits ``retry_backoff * 2**a`` seconds with +-25% jitter, or what the server's
    ``Retry-After`` asks; every wait is cut to 8 seconds, so with the default ``max_retries=2``
    a call waits 16 seconds at most in all (8 per retry). ``deadline`` bounds the whole call.

    Setup:
        ```bash
        python -m llama_cpp.server --model model.gguf --port 8080     # or vLLM, SGLang
        ```

    Instantiate:
        ```python
        from citeformer import ServerGenerator
        gen = ServerGenerator("http://localhost:8080")                   # llama.cpp server
        gen = ServerGenerator("http://vllm:8000/v1", "Qwen/Qwen2.5-7B-Instruct", engine="vllm")
        gen = ServerGenerator("http://sglang:30000", engine="sglang", timeout=30, deadline=60)
        ```

    Invoke:
        ```python
        answer = gen.generate("What is the capital of France?",
                              ["Paris is the capital of France.", "Berlin is in Germany."])
        answer.text        # 'Paris is the capital of France [1].'
        ```

    Stream:
        ```python
        stream = gen.stream(question, sources)
        for chunk in stream:          # a marker arrives whole
            print(chunk, end="")
        stream.answer                 # the CitedAnswer, once the loop ends
        ```

    Async:
        ```python
        answer = await gen.agenerate(question, sources)
        stream = gen.astream(question, sources)
        async for chunk in stream: ...
        ```

    Test without a server: ``ServerGenerator(url, transport=citeformer.testing.FakeServer())``.
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
        deadline: float | None = None,
        context_length: int | None = None,
        headers: dict[str, str] | None = None,
        transport: Any = None,
        steering: bool | None = None,
    ) -> None:
        """Point at the server at ``base_url`` (with or without its ``/v1``).

        Args:
            base_url: The server's address. A user name and password in it
                (``https://user:secret@host``) are sent as HTTP Basic auth and never shown: not
                in ``base_url``, ``repr``, messages or httpx's log.
            model: The served model's name; ``None`` asks the server (``GET /v1/models``) on
                first use and takes the first.
            engine: ``"llama.cpp"``, ``"vllm"``, ``"vllm-guided"`` (vLLM before v0.12.0) or
                ``"sglang"``: which request field the grammar travels in.
            api_key: Sent as ``Authorization: Bearer``; default ``$CITEFORMER_API_KEY``, else
                ``$OPENAI_API_KEY``, else none.
            timeout: Seconds for connecting and between two received chunks.
            max_retries: Further attempts after a connection error or a 408/429/5xx answer.
            retry_backoff: Seconds before the first retry, doubled for each next one.
            deadline: Seconds one call may take in all (``generate``, or a stream from its first
                chunk to its end): connecting, retries and their waits, and the whole answer.
                ``None`` (default): no total limit beyond ``timeout``. It is checked before
                each attempt and wait and as each piece of the answer arrives, and no request
                waits on the server longer than the time left when it was sent.
            context_length: The served model's context, if wrappers should know it.
            headers: More HTTP headers for every request.
            transport: An ``httpx`` transport, for tests (``citeformer.testing.FakeServer``,
                ``httpx.MockTransport``).
            steering: Run citeformer's steering (evidence-chosen ids and the readability
                levers) inside the engine, through its processor (``citeformer.vllm``; vLLM
                only). ``None`` (default): with ``engine="vllm"``, ask the server once whether
                it runs the processor (``steers()``) and steer if it does, else send the
                grammar alone and log a warning; no steering elsewhere. ``True``: require it
                (a server without the processor is an error). ``False``: the grammar alone.

        Raises:
            InvalidInputError: A bad URL, engine or setting.
        """
        self.engine: str = check_engine(engine)
        self.deadline = check_deadline(deadline)
        self._transport = Transport(
            base_url, model=model, api_key=api_key, headers=headers, timeout=timeout,
            max_retries=max_retries, retry_backoff=retry_backoff, transport=transport,
        )
        self.context_length = context_length
        if steering is not None and not isinstance(steering, bool):
            raise InvalidInputError(f"steering must be True, False or None, got {steering!r}")
        if steering and self.engine not in STEERING_ENGINES:
            raise InvalidInputError(
                f"steering runs inside vLLM only (citeformer.vllm:SteeringProcessor); a "
                f"{self.engine} server takes the grammar alone: drop steering=True"
            )
        self.steering = steering if self.engine in STEERING_ENGINES else False
        """The steering setting: ``None`` (ask the server), ``True`` or ``False``."""
        self._steers: bool | None = None if self.steering is not False else False
        self._steers_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"ServerGenerator({self.base_url!r}, {self.model!r}, engine={self.engine!r})"

    @property
    def base_url(self) -> str:
        """The server's OpenAI-compatible root (``.../v1``), without credentials."""
        return self._transport.base_url

    @property
    def model(self) -> str | None:
        """The served model's name, once given or asked of the server."""
        return self._transport.model

    @property
    def timeout(self) -> float:
        """Seconds for connecting and between two received chunks."""
        return self._transport.timeout

    @property
    def max_retries(self) -> int:
        """Further attempts after a connection error or a 408/429/5xx answer."""
        return self._transport.max_retries

    @property
    def retry_backoff(self) -> float:
        """Seconds before the first retry."""
        return self._transport.retry_backoff

    def check(self) -> str:
        """Ask the server which model it serves (``GET /v1/models``); return the name in use.

        Raises:
            ServerConnectionError: The server cannot be reached.
            ServerResponseError: It answers with an error.
        """
        return self._transport.served_model(self._start())

    async def acheck(self) -> str:
        """Async ``check``."""
        async with self._transport.aclient() as client:
            return await self._transport.aserved_model(client, self._start())

    def steers(self) -> bool:
        """Whether answers are steered inside the engine (asked of the server once, then kept).

        vLLM runs citeformer's processor when it was started with ``--logits-processors
        citeformer.vllm:SteeringProcessor``: the server then refuses a handshake request with
        the processor's reply (HTTP 400, before anything is generated). A server without it
        answers the handshake (one token), and answers are then the grammar's alone.

        Raises:
            InvalidInputError: ``steering=True`` and the server does not run the processor.
        """
        if self._steers is None:
            with self._steers_lock:
                if self._steers is None:
                    self._steers = self._settle(self._handshake())
        return self._steers

    async def asteers(self) -> bool:
        """Async ``steers``."""
        if self._steers is None:
            found = await self._ahandshake()
            with self._steers_lock:
                if self._steers is None:
                    self._steers = self._settle(found)
        return self._steers

    def _handshake(self) -> bool:
        deadline = self._start()
        try:
            response = self._transport.post("/chat/completions", _HANDSHAKE_BODY, deadline)
            self._transport.read(response, deadline, _HANDSHAKE_LIMIT_BYTES)
        except ServerResponseError as error:
            return _handshake_answered(error)
        return False

    async def _ahandshake(self) -> bool:
        deadline = self._start()
        try:
            async with self._transport.aclient() as client:
                response = await self._transport.apost(
                    client, "/chat/completions", _HANDSHAKE_BODY, deadline
                )
                await self._transport.aread(response, deadline, _HANDSHAKE_LIMIT_BYTES)
        except ServerResponseError as error:
            return _handshake_answered(error)
        return False

    def _settle(self, found: bool) -> bool:
        if found:
            return True
        if self.steering:
            raise InvalidInputError(
                f"steering=True, but the vLLM server at {self.base_url} does not run "
                "citeformer's steering processor: start it with --logits-processors "
                "citeformer.vllm:SteeringProcessor (citeformer installed in its environment), "
                "or pass steering=None to fall back to the grammar alone"
            )
        logger.warning(
            "the vLLM server at %s does not run citeformer's steering processor: answers carry "
            "the citation grammar alone, without evidence or readability steering (start it "
            "with --logits-processors citeformer.vllm:SteeringProcessor)", self.base_url,
        )
        return False

    def close(self) -> None:
        """Close the pooled connections (also done on leaving a ``with`` block)."""
        self._transport.close()

    def __enter__(self) -> ServerGenerator:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def request_body(
        self, question: str, sources: Sequence[SourceLike], policy: Policy | str = DEFAULT_POLICY,
        *, stream: bool = False, **options: Unpack[GenerationOptions],
    ) -> dict[str, Any]:
        """The JSON body ``generate`` (or, with ``stream=True``, ``stream``) would send.

        Chat completions carry the request's messages; with ``prompt`` (text you rendered
        yourself) the body is a text completion's instead. A steered body (``steers()``) carries
        the steering payload and the markers' grammar.
        """
        request = build_request(question, sources, policy, **options)
        return dict(self._call(request, stream=stream, steered=self._steered(request)).body)

    def generate(
        self, question: str, sources: Sequence[SourceLike], policy: Policy | str = DEFAULT_POLICY,
        **options: Unpack[GenerationOptions],
    ) -> CitedAnswer:
        """Answer ``question`` from ``sources``, as ``CiteGenerator.generate`` does.

        The options are those of ``citeformer.GenerationOptions``, checked before anything is
        sent. ``prompt`` replaces the chat messages with text you rendered yourself (sent to
        ``/v1/completions``); ``constrained=False`` sends no grammar, for comparisons only.
        ``evidence`` reweights a local model's logits, which no server exposes: passing one
        raises ``InvalidInputError``.

        Raises:
            ServerIgnoredGrammarError: The answer breaks the grammar that was sent.
            ServerConnectionError: The server cannot be reached, or the deadline passed.
            ServerResponseError: The server answers with an error or a malformed body.
        """
        return self.answer(build_request(question, sources, policy, **options))

    async def agenerate(
        self, question: str, sources: Sequence[SourceLike], policy: Policy | str = DEFAULT_POLICY,
        **options: Unpack[GenerationOptions],
    ) -> CitedAnswer:
        """Async ``generate``."""
        return await self.aanswer(build_request(question, sources, policy, **options))

    def stream(
        self, question: str, sources: Sequence[SourceLike], policy: Policy | str = DEFAULT_POLICY,
        **options: Unpack[GenerationOptions],
    ) -> ServerAnswerStream | WholeAnswer:
        """Like ``generate``, but an iterator of text chunks as the server sends them (SSE).

        As with ``CiteGenerator.stream``, a marker is held back until its ``]`` arrives and the
        chunks join to ``stream.answer.text``; text the grammar refuses raises before it is
        yielded. A connection lost mid-answer raises ``ServerConnectionError`` and leaves no
        ``answer``. Arguments are checked before this returns. Token counts are those of the
        stream's last ``usage`` event; a server that sends none (llama-cpp-python's) leaves
        ``prompt_tokens`` at 0 and ``generated_tokens`` counts the text pieces received.
        """
        return self.answer_stream(build_request(question, sources, policy, **options))

    def astream(
        self, question: str, sources: Sequence[SourceLike], policy: Policy | str = DEFAULT_POLICY,
        **options: Unpack[GenerationOptions],
    ) -> AsyncServerAnswerStream | WholeAnswer:
        """Async ``stream``: ``async for chunk in gen.astream(...)``, then ``.answer``."""
        return self.aanswer_stream(build_request(question, sources, policy, **options))

    def answer(self, request: GenerationRequest) -> CitedAnswer:
        """The answer to a checked request (what ``generate`` runs).

        A request the sources cannot answer (``GenerationRequest.refused``) sends nothing.
        """
        if (refused := request.refused()) is not None:
            return refused
        call = self._call(request, stream=False, steered=self._steered(request))
        deadline = self._start()
        response = self._transport.post(call.path, call.body, deadline)
        return completed(call, self._transport.read(response, deadline, body_limit(call)))

    async def aanswer(self, request: GenerationRequest) -> CitedAnswer:
        """Async ``answer``."""
        if (refused := request.refused()) is not None:
            return refused
        call = await self._acall(request, stream=False)
        deadline = self._start()
        async with self._transport.aclient() as client:
            response = await self._transport.apost(client, call.path, call.body, deadline)
            body = await self._transport.aread(response, deadline, body_limit(call))
        # Checking it compiles the grammar sent (the first time): off the event loop.
        return await asyncio.to_thread(completed, call, body)

    def answer_stream(self, request: GenerationRequest) -> ServerAnswerStream | WholeAnswer:
        """A stream of the answer to a checked request (what ``stream`` returns).

        A refusal, which sends nothing, is one chunk.
        """
        if (refused := request.refused()) is not None:
            return WholeAnswer(refused)
        call = self._call(request, stream=True, steered=self._steered(request))
        return ServerAnswerStream(self._transport, call, self.deadline)

    def aanswer_stream(
        self, request: GenerationRequest
    ) -> AsyncServerAnswerStream | WholeAnswer:
        """Async ``answer_stream``.

        The first steered call asks the server whether it steers (``asteers``) on the stream's
        first chunk, never blocking the event loop; once that is known, a bad option raises
        here.
        """
        if (refused := request.refused()) is not None:
            return WholeAnswer(refused)
        if request.constrained and self._steers is None:
            return AsyncServerAnswerStream(
                self._transport, partial(self._acall, request, stream=True), self.deadline
            )
        call = self._call(request, stream=True, steered=self._steered(request))
        return AsyncServerAnswerStream(self._transport, call, self.deadline)

    def _steered(self, request: GenerationRequest) -> bool:
        return request.constrained and self._steers is not False and self.steers()

    async def _acall(self, request: GenerationRequest, *, stream: bool) -> ServerCall:
        steered = request.constrained and await self.asteers()
        return self._call(request, stream=stream, steered=steered)

    def _call(self, request: GenerationRequest, *, stream: bool, steered: bool) -> ServerCall:
        if not steered and request.evidence_or(None) is not None:
            raise InvalidInputError(
                "evidence= reweights the model's logits, which only a steered engine reaches "
                "(CiteGenerator, or vLLM with citeformer's steering processor): drop it for "
                "this ServerGenerator"
            )
        # Unsteered, evidence left at the library's default is not asked for: nothing to reweight.
        return prepare_call(
            request, self.engine, self.base_url, model=self.model, stream=stream, steered=steered
        )

    def _start(self) -> Deadline:
        return Deadline(self.deadline, self.base_url)


_HANDSHAKE_BODY: dict[str, Any] = {
    "messages": [{"role": "user", "content": "?"}],
    "max_tokens": 1,
    "vllm_xargs": {PAYLOAD_KEY: HANDSHAKE},
}


def _handshake_answered(error: ServerResponseError) -> bool:
    """Whether an error to the handshake is the processor's reply; any other error is raised."""
    if error.status_code == 400 and HANDSHAKE_REPLY in error.body:
        return True
    raise error
