"""``ServerGenerator``: cited answers from a serving engine, its grammar enforced there."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from citeformer.answers import WholeAnswer
from citeformer.generation.forms import AsyncCallForms, CallForms
from citeformer.request import DEFAULT_POLICY, GenerationRequest, SourceLike, build_request
from citeformer.server._assemble import body_limit, completed
from citeformer.server._engines import Engine, ServerCall, check_engine, prepare_call
from citeformer.server._handshake import STEERING_ENGINES, Handshake
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


_Stream = ServerAnswerStream | WholeAnswer
_AsyncStream = AsyncServerAnswerStream | WholeAnswer


class ServerGenerator(CallForms[_Stream], AsyncCallForms[_AsyncStream]):
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
    request's own grammar, evidence-chosen ids and every readability lever (``steering``). A
    vLLM without it gets the grammar alone, as llama.cpp and SGLang servers always do.

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
        self._handshake = Handshake(self._transport, self.engine, steering, self.deadline)
        self.steering = self._handshake.steering
        """The steering setting: ``None`` (ask the server), ``True`` or ``False``."""

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
        return self._transport.served_model(Deadline(self.deadline, self.base_url))

    async def acheck(self) -> str:
        """Async ``check``."""
        deadline = Deadline(self.deadline, self.base_url)
        async with self._transport.aclient() as client:
            return await self._transport.aserved_model(client, deadline)

    def steers(self) -> bool:
        """Whether answers are steered inside the engine (asked of the server once, then kept).

        A vLLM running citeformer's processor refuses a handshake request with the processor's
        reply (HTTP 400, before anything is generated); one without it answers (one token), and
        its answers are then the grammar's alone, with a warning logged.

        Raises:
            InvalidInputError: ``steering=True`` and the server does not run the processor.
        """
        return self._handshake.steers()

    async def asteers(self) -> bool:
        """Async ``steers``."""
        return await self._handshake.asteers()

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

    def answer(self, request: GenerationRequest) -> CitedAnswer:
        """The answer to a checked request (what ``generate`` runs), as ``CiteGenerator``'s.

        ``prompt`` replaces the chat messages with text you rendered yourself (sent to
        ``/v1/completions``); ``constrained=False`` sends no grammar, for comparisons only.
        ``evidence`` reweights a model's logits, which only a steered server reaches: passing
        one to another raises ``InvalidInputError``. A request the sources cannot answer
        (``GenerationRequest.refused``) sends nothing.

        Raises:
            ServerIgnoredGrammarError: The answer breaks the grammar that was sent.
            ServerConnectionError: The server cannot be reached, or the deadline passed.
            ServerResponseError: The server answers with an error or a malformed body.
        """
        if (refused := request.refused()) is not None:
            return refused
        call = self._call(request, stream=False, steered=self._steered(request))
        deadline = Deadline(self.deadline, self.base_url)
        response = self._transport.post(call.path, call.body, deadline)
        return completed(call, self._transport.read(response, deadline, body_limit(call)))

    async def aanswer(self, request: GenerationRequest) -> CitedAnswer:
        """Async ``answer``."""
        if (refused := request.refused()) is not None:
            return refused
        call = await self._acall(request, stream=False)
        deadline = Deadline(self.deadline, self.base_url)
        async with self._transport.aclient() as client:
            response = await self._transport.apost(client, call.path, call.body, deadline)
            body = await self._transport.aread(response, deadline, body_limit(call))
        # Checking it compiles the grammar sent (the first time): off the event loop.
        return await asyncio.to_thread(completed, call, body)

    def answer_stream(self, request: GenerationRequest) -> ServerAnswerStream | WholeAnswer:
        """A stream of the answer to a checked request (what ``stream`` returns), as sent (SSE).

        As with ``CiteGenerator``'s, a marker is held back until its ``]`` arrives and the
        chunks join to ``stream.answer.text``; text the grammar refuses raises before it is
        yielded. A connection lost mid-answer raises ``ServerConnectionError`` and leaves no
        ``answer``. Token counts are those of the stream's last ``usage`` event; a server that
        sends none (llama-cpp-python's) leaves ``prompt_tokens`` at 0 and ``generated_tokens``
        counts the text pieces received. A refusal, which sends nothing, is one chunk.
        """
        if (refused := request.refused()) is not None:
            return WholeAnswer(refused)
        call = self._call(request, stream=True, steered=self._steered(request))
        return ServerAnswerStream(self._transport, call, self.deadline)

    def aanswer_stream(self, request: GenerationRequest) -> AsyncServerAnswerStream | WholeAnswer:
        """Async ``answer_stream``.

        The first steered call asks whether the server steers (``asteers``) on its first chunk,
        never blocking the event loop; once that is known, a bad option raises here.
        """
        if (refused := request.refused()) is not None:
            return WholeAnswer(refused)
        if request.constrained and self._handshake.known is None:
            return AsyncServerAnswerStream(
                self._transport, partial(self._acall, request, stream=True), self.deadline
            )
        call = self._call(request, stream=True, steered=self._steered(request))
        return AsyncServerAnswerStream(self._transport, call, self.deadline)

    def _steered(self, request: GenerationRequest) -> bool:
        return request.constrained and self._handshake.known is not False and self.steers()

    async def _acall(self, request: GenerationRequest, *, stream: bool) -> ServerCall:
        steered = request.constrained and await self.asteers()
        return self._call(request, stream=stream, steered=steered)

    def _call(self, request: GenerationRequest, *, stream: bool, steered: bool) -> ServerCall:
        return prepare_call(
            request, self.engine, self.base_url, model=self.model, stream=stream, steered=steered
        )
