"""The request body each serving engine reads, grammar included, for one ``GenerationRequest``.

Where each engine reads the grammar (chat and text completions alike):

- llama.cpp via llama-cpp-python's server: ``"grammar": "<GBNF>"``, a field of both
  ``CreateCompletionRequest`` and ``CreateChatCompletionRequest``
  (abetlen/llama-cpp-python, ``llama_cpp/server/types.py``; ``llama_cpp/server/app.py`` turns it
  into ``LlamaGrammar.from_string``). llama.cpp's own ``llama-server`` reads the same field.
- vLLM: ``"structured_outputs": {"grammar": "<GBNF>"}``; releases before v0.12.0 read
  ``"guided_grammar": "<GBNF>"`` instead, removed in v0.12.0
  (https://docs.vllm.ai/en/latest/features/structured_outputs/). A vLLM that no longer reads it
  ignores the field without an error and answers unconstrained.
- SGLang: ``"ebnf": "<GBNF>"`` (https://docs.sglang.io/advanced_features/structured_outputs.html;
  ``ebnf`` in sgl-project/sglang ``python/sglang/srt/entrypoints/openai/protocol.py``). Its
  default backend, XGrammar, reads llama.cpp's GBNF dialect, the one ``build_grammar`` writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from citeformer.decoding.payload import PAYLOAD_KEY, steering_payload
from citeformer.errors import InvalidInputError
from citeformer.grammar.rules import marker_grammar
from citeformer.request import GenerationRequest

Engine = Literal["llama.cpp", "vllm", "vllm-guided", "sglang"]
ENGINES: tuple[str, ...] = ("llama.cpp", "vllm", "vllm-guided", "sglang")
"""``vllm-guided``: vLLM releases before v0.12.0, which read ``guided_grammar``."""

GRAMMAR_FIELDS: dict[str, str] = {
    "llama.cpp": "grammar",
    "vllm": "structured_outputs.grammar",
    "vllm-guided": "guided_grammar",
    "sglang": "ebnf",
}
"""The body field each engine reads the grammar from (a dotted name is a nested object)."""


def check_engine(engine: object) -> str:
    """``engine`` if it names a known engine."""
    if engine not in ENGINES:
        raise InvalidInputError(f"unknown engine {engine!r}; use one of: {', '.join(ENGINES)}")
    return str(engine)


@dataclass(frozen=True)
class ServerCall:
    """One prepared completion: the checked request and what is sent for it."""

    request: GenerationRequest
    """The request this call answers."""

    engine: str
    """The engine the body is written for."""

    base_url: str
    """The server's root (``.../v1``, without credentials), for messages."""

    path: str
    """``/chat/completions``, or ``/completions`` for a prompt of the caller's own."""

    body: dict[str, Any]
    """The JSON body, without ``model`` when the model is not known yet."""

    grammar: str | None
    """The GBNF the answer is re-parsed against (``None`` when unconstrained): the one sent
    with the request, or, ``steered``, the request's own, which the steering processor
    enforced beside the markers' grammar that was sent."""

    steered: bool = False
    """Whether the request carries citeformer's steering payload for the engine's processor."""

    @property
    def grammar_field(self) -> str:
        """Where the grammar travels in the body, for messages."""
        return GRAMMAR_FIELDS[self.engine]


def prepare_call(
    request: GenerationRequest,
    engine: str,
    base_url: str,
    *,
    model: str | None,
    stream: bool,
    steered: bool = False,
) -> ServerCall:
    """The body ``engine`` reads for ``request``: messages or prompt, decoding, grammar.

    ``steered`` (vLLM with citeformer's processor): the body carries the steering payload in
    ``vllm_xargs`` and, as structured output, the markers' grammar alone; the processor
    enforces the request's own grammar (``citeformer.vllm``). Unsteered, a request that asks
    for ``evidence`` is refused: no other engine reaches the logits it reweights (evidence left
    at the library's default is not asked for).
    """
    if not steered and request.evidence_or(None) is not None:
        raise InvalidInputError(
            "evidence= reweights the model's logits, which only a steered engine reaches "
            "(CiteGenerator, or vLLM with citeformer's steering processor): drop it for "
            "this ServerGenerator"
        )
    body: dict[str, Any] = {}
    if model is not None:
        body["model"] = model
    if request.prompt is None:
        path = "/chat/completions"
        body["messages"] = request.messages()
    else:
        path = "/completions"
        body["prompt"] = request.prompt
    body["max_tokens"] = request.max_new_tokens
    # Greedy is temperature 0 on all three engines; sampling uses the whole distribution,
    # as CiteGenerator does (top_p 1).
    body["temperature"] = request.temperature if request.do_sample else 0.0
    if request.do_sample:
        body["top_p"] = 1.0
    if engine == "llama.cpp":
        # llama-cpp-python's server defaults to repeat_penalty 1.1, top_k 40 and min_p 0.05
        # (llama_cpp/server/types.py); CiteGenerator applies none of them.
        body["repeat_penalty"] = 1.0
        if request.do_sample:
            body.update(top_k=0, min_p=0.0)
    if request.seed is not None:
        body["seed"] = request.seed
    if stream:
        body["stream"] = True
        # Token counts in a last chunk (OpenAI's stream_options): vLLM and SGLang send it,
        # llama-cpp-python's server ignores the field.
        body["stream_options"] = {"include_usage": True}
    if not request.constrained:
        return ServerCall(request, engine, base_url, path, body, None)
    if steered:
        markers = marker_grammar(request.n_sources, request.grammar.max_group)
        body.update(_grammar_field(engine, markers))
        body["vllm_xargs"] = {PAYLOAD_KEY: steering_payload(request)}
        grammar = request.grammar_text(spell_quotes=False)
    else:
        grammar = request.grammar_text(spell_quotes=True)
        body.update(_grammar_field(engine, grammar))
    return ServerCall(request, engine, base_url, path, body, grammar, steered)


def _grammar_field(engine: str, grammar: str) -> dict[str, Any]:
    if engine == "vllm":
        return {"structured_outputs": {"grammar": grammar}}
    if engine == "vllm-guided":
        return {"guided_grammar": grammar}
    if engine == "sglang":
        return {"ebnf": grammar}
    return {"grammar": grammar}
