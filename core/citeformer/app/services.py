"""What ``citeformer ask`` works with: where answers and embeddings come from, where warnings go.

``Services`` holds them; ``main(argv, services=...)`` takes others (a scripted generator, a toy
embedder, a list collecting warnings), so the command runs in tests without a model.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from citeformer import AnswerGenerator, CiteformerError, ModelLoadError, ServerResponseError
from citeformer.app.errors import PROG, InputError
from citeformer.app.retrieval import Embedder

__all__ = [
    "ConnectServer",
    "LoadModel",
    "ServedGenerator",
    "Services",
    "connect_server",
    "embed_texts",
    "load_model",
    "looks_like_path",
    "print_warning",
]


class ServedGenerator(AnswerGenerator, Protocol):
    """A generator behind a server, which knows the name of the model it answers with."""

    @property
    def model(self) -> str | None:
        """The served model's name."""
        ...


class LoadModel(Protocol):
    """Loads the model of ``--model`` (``None``: the embedded one)."""

    def __call__(self, model: str | None, *, progress: bool) -> AnswerGenerator:
        """The generator; ``progress``: whether loading may report on stderr."""
        ...


class ConnectServer(Protocol):
    """Connects to the server of ``--server`` and checks that it answers."""

    def __call__(self, url: str, model: str | None, engine: str) -> ServedGenerator:
        """The generator of the server at ``url`` serving ``model`` with ``engine``."""
        ...


def load_model(model: str | None, *, progress: bool) -> AnswerGenerator:
    """The embedded model, or ``model`` (an HF hub id or a local folder) as a ``CiteGenerator``."""
    # citeformer.CiteGenerator imports torch and transformers: only once the input is checked.
    if model is None:
        from citeformer import CiteGenerator

        return CiteGenerator.default(progress=progress)
    local = Path(model).expanduser()
    if not local.exists() and looks_like_path(model):
        raise InputError(
            f"model folder {model!r} does not exist (--model takes a local folder or a "
            "HuggingFace hub id such as HuggingFaceTB/SmolLM2-360M-Instruct)"
        )
    from citeformer import CiteGenerator

    try:
        return CiteGenerator.from_pretrained(str(local) if local.exists() else model)
    except CiteformerError:
        raise
    except Exception as error:  # transformers raises OSError, ValueError, HF hub errors...
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ModelLoadError(f"could not load model {model!r}: {reason}") from error


def connect_server(
    url: str, model: str | None, engine: str, *, transport: Any = None
) -> ServedGenerator:
    """A ``ServerGenerator`` for the server at ``url``, checked to answer before any work.

    ``transport``: an ``httpx`` transport to send through instead of the network.
    """
    from citeformer import ServerGenerator

    generator = ServerGenerator(url, model, engine=engine, transport=transport)
    try:
        generator.check()
    except ServerResponseError as error:
        if error.status_code == 404:  # no OpenAI-compatible API there: the URL is wrong
            raise InputError(str(error)) from error
        raise
    return generator


def embed_texts(texts: Sequence[str]) -> list[list[float]]:
    """Unit-length all-MiniLM-L6-v2 embeddings (``citeformer.evidence.embeddings.embed``)."""
    from citeformer.evidence.embeddings import embed

    return embed(texts)


def print_warning(message: str) -> None:
    """``citeformer: warning: <message>`` on stderr."""
    print(f"{PROG}: warning: {message}", file=sys.stderr, flush=True)


def looks_like_path(model: str) -> bool:
    """Whether ``--model`` names a local folder rather than a hub id."""
    # A hub id is "name" or "owner/name"; anything else with a separator, or starting like a
    # path, is meant as a local folder.
    return (
        model.startswith((".", "/", "~"))
        or "\\" in model
        or model.count("/") > 1
        or os.path.isabs(model)
    )


@dataclass(frozen=True)
class Services:
    """The collaborators of ``citeformer ask``; the defaults are the real ones."""

    load_model: LoadModel = load_model
    """Loads the model of ``--model`` (``None``: the embedded one)."""

    connect_server: ConnectServer = connect_server
    """Connects to ``--server URL`` with ``--server-model`` and ``--engine``."""

    embed: Embedder = embed_texts
    """Embeds passages and the question for retrieval."""

    warn: Callable[[str], None] = print_warning
    """Shows a warning: a skipped file or folder, a model cache rebuilt."""
