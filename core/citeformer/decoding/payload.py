"""A request's steering settings as one JSON string, for a processor inside a serving engine.

What the steering of one answer needs (the question, the sources' texts and titles, the policy,
the grammar, readability and evidence settings) travels with a request to the engine (vLLM's
``vllm_xargs``, ``SamplingParams.extra_args``) under ``PAYLOAD_KEY``, and the processor there
rebuilds the ``GenerationRequest`` from it with the same checks as ``build_request``: a payload
some other client made up is refused with an error that names the field, never half-read. Every
number in it is held to its option's range (a weight of ``1e308``, a 400-digit int, ``NaN``) by
an ``InvalidInputError``, a ``ValueError``: vLLM answers it with HTTP 400.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

from citeformer.errors import InputTypeError, InvalidInputError, shown
from citeformer.evidence.refusal import Refusal
from citeformer.evidence.scoring import EmbeddingEvidence, Evidence, LexicalEvidence
from citeformer.grammar.rules import GrammarOptions
from citeformer.readability import Readability
from citeformer.request import GENERATOR_DEFAULT, GenerationRequest, build_request
from citeformer.types import Source

__all__ = [
    "HANDSHAKE",
    "HANDSHAKE_REPLY",
    "MAX_PAYLOAD_CHARS",
    "PAYLOAD_KEY",
    "PAYLOAD_VERSION",
    "request_from_payload",
    "steering_payload",
]

PAYLOAD_KEY = "citeformer"
"""The key of the payload among a request's extra arguments."""
PAYLOAD_VERSION = 1
MAX_PAYLOAD_CHARS = 4_000_000
"""Longest payload read: the sources of one request, with room to spare."""

HANDSHAKE = "handshake"
"""The payload of a request a steering processor refuses with ``HANDSHAKE_REPLY`` (an HTTP 400
from vLLM): how a client tells whether a server runs the processor, before any answer."""
HANDSHAKE_REPLY = f"citeformer steering processor, payload version {PAYLOAD_VERSION}"

_FIELDS = {
    "v", "question", "sources", "policy", "grammar", "readability", "evidence", "refusal",
}


def steering_payload(request: GenerationRequest) -> str:
    """The steering settings of ``request`` as a JSON string.

    A custom ``Evidence`` subclass cannot travel: it raises ``InvalidInputError``.
    """
    return json.dumps({
        "v": PAYLOAD_VERSION,
        "question": request.question,
        "sources": [{"text": s.text, "title": s.title} for s in request.sources],
        "policy": request.policy.value,
        "grammar": request.grammar.as_dict(),
        "readability": dataclasses.asdict(request.readability),
        "evidence": _evidence_data(request.evidence),
        # The client measured the support: only the sentence the model may choose travels.
        "refusal": request.offered_refusal,
    }, ensure_ascii=False, separators=(",", ":"))


def request_from_payload(payload: object) -> GenerationRequest:
    """The request a payload describes, checked; anything else raises ``InvalidInputError``.

    The message names the field (``citeformer.readability.end_bias``) and what is wrong.
    """
    if not isinstance(payload, str):
        raise InputTypeError(
            f"{PAYLOAD_KEY} must be a JSON string (citeformer's steering payload), got "
            f"{type(payload).__name__}"
        )
    if len(payload) > MAX_PAYLOAD_CHARS:
        raise InvalidInputError(
            f"{PAYLOAD_KEY} holds {len(payload)} characters, more than {MAX_PAYLOAD_CHARS}; "
            "send fewer or shorter sources"
        )
    try:
        data = json.loads(payload)
    except (ValueError, RecursionError) as error:
        raise InvalidInputError(f"{PAYLOAD_KEY} is not valid JSON: {error}") from None
    if not isinstance(data, dict):
        raise InputTypeError(f"{PAYLOAD_KEY} must be a JSON object, got {type(data).__name__}")
    if data.get("v") != PAYLOAD_VERSION:
        raise InvalidInputError(
            f"{PAYLOAD_KEY}.v is {shown(data.get('v'))}; this processor reads version "
            f"{PAYLOAD_VERSION}: install the same citeformer in the client and the server"
        )
    unknown = sorted(set(data) - _FIELDS)
    if unknown:
        raise InvalidInputError(f"{PAYLOAD_KEY} has unknown field(s) {unknown}")
    sources = _sources(data.get("sources"))
    grammar = _options(GrammarOptions, "grammar", data.get("grammar", {}))
    readability = _options(Readability, "readability", data.get("readability", {}))
    evidence = _evidence(data.get("evidence", "default"))
    refusal = _refusal(data.get("refusal"))
    try:
        return build_request(
            data.get("question"),  # type: ignore[arg-type]
            sources, data.get("policy", "required"),
            grammar=grammar, readability=readability, evidence=evidence, refusal=refusal,
        )
    except InvalidInputError as error:
        raise type(error)(f"{PAYLOAD_KEY}: {error}") from None


def _refusal(text: object) -> Refusal | None:
    """The refusal the client offered the model (always, whatever the support), or ``None``."""
    if text is None:
        return None
    if not isinstance(text, str):
        raise InputTypeError(f"{PAYLOAD_KEY}.refusal must be null or a string, got {text!r:.60}")
    try:
        return Refusal(text=text, threshold=0.0, offer_below=math.inf)
    except InvalidInputError as error:
        raise type(error)(f"{PAYLOAD_KEY}.refusal: {error}") from None


def _evidence_data(evidence: object) -> Any:
    if evidence is GENERATOR_DEFAULT:
        return "default"
    if evidence is None:
        return None
    if type(evidence) is LexicalEvidence:
        return {"name": "lexical", "weight": evidence.weight,
                "question_weight": evidence.question_weight}
    if type(evidence) is EmbeddingEvidence:
        return {"name": "embedding", "weight": evidence.weight}
    raise InvalidInputError(
        f"evidence {evidence!r} cannot travel to a serving engine, which rebuilds evidence from "
        "its name: use LexicalEvidence or EmbeddingEvidence (their weights travel), or None"
    )


def _evidence(value: object) -> Evidence | str | None:
    if value is None:
        return None
    if value == "default":
        return "default"
    if not isinstance(value, dict):
        raise InputTypeError(
            f"{PAYLOAD_KEY}.evidence must be null, \"default\" or an object, got {value!r:.60}"
        )
    settings = dict(value)
    name = settings.pop("name", None)
    kinds: dict[str, type[Evidence]] = {"lexical": LexicalEvidence, "embedding": EmbeddingEvidence}
    if not isinstance(name, str) or name not in kinds:
        raise InvalidInputError(
            f"{PAYLOAD_KEY}.evidence.name is {shown(name)}; use one of {', '.join(kinds)}"
        )
    return _options(kinds[name], "evidence", settings)  # type: ignore[no-any-return]


def _sources(value: object) -> list[Source]:
    if not isinstance(value, list):
        raise InputTypeError(f"{PAYLOAD_KEY}.sources must be a list, got {type(value).__name__}")
    sources = []
    for index, item in enumerate(value):
        if not isinstance(item, dict) or set(item) - {"text", "title"}:
            raise InputTypeError(
                f"{PAYLOAD_KEY}.sources[{index}] must be an object with text and title"
            )
        title = item.get("title")
        if title is not None and not isinstance(title, str):
            raise InputTypeError(f"{PAYLOAD_KEY}.sources[{index}].title must be a string")
        sources.append(Source(item.get("text"), title=title))  # type: ignore[arg-type]
    return sources


def _options(kind: Any, name: str, value: object) -> Any:
    if not isinstance(value, dict):
        raise InputTypeError(f"{PAYLOAD_KEY}.{name} must be an object, got {value!r:.60}")
    try:
        return kind(**value)
    except TypeError as error:  # an unknown keyword
        raise InputTypeError(f"{PAYLOAD_KEY}.{name}: {error}") from None
    except InvalidInputError as error:
        raise type(error)(f"{PAYLOAD_KEY}.{name}: {error}") from None
