"""Whether a vLLM server runs citeformer's steering processor: asked once, sync or async."""

from __future__ import annotations

import logging
import threading
from typing import Any

from citeformer.decoding.payload import HANDSHAKE, HANDSHAKE_REPLY, PAYLOAD_KEY
from citeformer.errors import InvalidInputError, ServerResponseError
from citeformer.server._transport import Deadline, Transport

__all__ = ["STEERING_ENGINES", "Handshake"]

logger = logging.getLogger("citeformer.server")

STEERING_ENGINES = ("vllm",)
"""The engines that run citeformer's steering processor (``citeformer.vllm``)."""
_HANDSHAKE_LIMIT_BYTES = 1 << 16
_HANDSHAKE_BODY: dict[str, Any] = {
    "messages": [{"role": "user", "content": "?"}],
    "max_tokens": 1,
    "vllm_xargs": {PAYLOAD_KEY: HANDSHAKE},
}


class Handshake:
    """One server's steering: the setting, and what the server answered (asked once, kept).

    vLLM runs citeformer's processor when it was started with ``--logits-processors
    citeformer.vllm:SteeringProcessor``: the server then refuses a handshake request with the
    processor's reply (HTTP 400, before anything is generated). A server without it answers the
    handshake (one token).
    """

    def __init__(
        self, transport: Transport, engine: str, steering: object, deadline: float | None
    ) -> None:
        if steering is not None and not isinstance(steering, bool):
            raise InvalidInputError(f"steering must be True, False or None, got {steering!r}")
        if steering and engine not in STEERING_ENGINES:
            raise InvalidInputError(
                f"steering runs inside vLLM only (citeformer.vllm:SteeringProcessor); a "
                f"{engine} server takes the grammar alone: drop steering=True"
            )
        self.steering: bool | None = steering if engine in STEERING_ENGINES else False
        """The setting: ``None`` (ask the server), ``True`` or ``False``."""
        self._transport = transport
        self._deadline = deadline
        self._found: bool | None = None if self.steering is not False else False
        self._lock = threading.Lock()

    @property
    def known(self) -> bool | None:
        """Whether the server steers, once known; ``None`` before it was asked."""
        return self._found

    def steers(self) -> bool:
        """Whether the server steers; the first call asks it, blocking."""
        if self._found is None:
            with self._lock:
                if self._found is None:
                    self._found = self._settle(self._ask())
        return self._found

    async def asteers(self) -> bool:
        """Async ``steers``: the first call awaits the server's answer."""
        if self._found is None:
            found = await self._aask()
            with self._lock:
                if self._found is None:
                    self._found = self._settle(found)
        return self._found

    def _ask(self) -> bool:
        deadline = Deadline(self._deadline, self._transport.base_url)
        try:
            response = self._transport.post("/chat/completions", _HANDSHAKE_BODY, deadline)
            self._transport.read(response, deadline, _HANDSHAKE_LIMIT_BYTES)
        except ServerResponseError as error:
            return _answered(error)
        return False

    async def _aask(self) -> bool:
        deadline = Deadline(self._deadline, self._transport.base_url)
        try:
            async with self._transport.aclient() as client:
                response = await self._transport.apost(
                    client, "/chat/completions", _HANDSHAKE_BODY, deadline
                )
                await self._transport.aread(response, deadline, _HANDSHAKE_LIMIT_BYTES)
        except ServerResponseError as error:
            return _answered(error)
        return False

    def _settle(self, found: bool) -> bool:
        if found:
            return True
        base_url = self._transport.base_url
        if self.steering:
            raise InvalidInputError(
                f"steering=True, but the vLLM server at {base_url} does not run "
                "citeformer's steering processor: start it with --logits-processors "
                "citeformer.vllm:SteeringProcessor (citeformer installed in its environment), "
                "or pass steering=None to fall back to the grammar alone"
            )
        logger.warning(
            "the vLLM server at %s does not run citeformer's steering processor: answers carry "
            "the citation grammar alone, without evidence or readability steering (start it "
            "with --logits-processors citeformer.vllm:SteeringProcessor)", base_url,
        )
        return False


def _answered(error: ServerResponseError) -> bool:
    """Whether an error to the handshake is the processor's reply; any other error is raised."""
    if error.status_code == 400 and HANDSHAKE_REPLY in error.body:
        return True
    raise error
