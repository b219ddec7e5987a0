"""Which device and floating-point type a model runs in, when the user does not say.

``"auto"`` (the default of ``CiteGenerator.default`` and ``CiteGenerator.from_pretrained``):

- on a CUDA device, bfloat16 where the GPU computes it (``torch.cuda.is_bf16_supported``), else
  float16;
- on a CPU, bfloat16 where the CPU computes it natively: AMX tiles or AVX-512 BF16, as torch's
  own CPU feature probe reports them (``torch.cpu._is_amx_tile_supported`` and
  ``_is_avx512_bf16_supported``, which read CPUID), else float32. Without those instructions
  bfloat16 is emulated and slower than float32;
- elsewhere (``mps``, other backends), float32.

The choice was measured on both labeled sets before it became the default (benchmarks/README.md,
"bfloat16"). ``CITEFORMER_DTYPE`` overrides ``"auto"`` for a whole process.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from citeformer.errors import InvalidInputError

__all__ = ["DTYPES", "DTYPE_ENV", "cpu_computes_bfloat16", "resolve_device", "resolve_dtype"]

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
"""The dtypes a model can be loaded in, by name (``"auto"`` picks one of them)."""

DTYPE_ENV = "CITEFORMER_DTYPE"
"""An environment variable that, when set to a name of ``DTYPES``, replaces ``"auto"``."""


def cpu_computes_bfloat16() -> bool:
    """Whether this CPU has native bfloat16 arithmetic (AMX tiles or AVX-512 BF16)."""
    probes = ("_is_amx_tile_supported", "_is_avx512_bf16_supported")
    cpu = getattr(torch, "cpu", None)
    return any(bool(getattr(cpu, name, lambda: False)()) for name in probes)


def resolve_device(device: str | torch.device | None) -> torch.device:
    """The device a model is placed on: ``device``, or CUDA when there is one, else the CPU."""
    if device is None or device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise InvalidInputError(
            f"device {device!r} is not a torch device; pass 'cpu', 'cuda', 'cuda:1' or 'mps'"
        ) from error
    if resolved.type == "cuda":
        if not torch.cuda.is_available():
            raise InvalidInputError(
                f"device {device!r} asks for CUDA but this torch has no CUDA device "
                f"(torch {torch.__version__}); pass device='cpu' or install a CUDA build of torch"
            )
        count = torch.cuda.device_count()
        if resolved.index is not None and resolved.index >= count:
            raise InvalidInputError(
                f"device {device!r}: this machine has {count} CUDA device(s), numbered from 0"
            )
    elif resolved.type == "mps" and not torch.backends.mps.is_available():
        raise InvalidInputError(f"device {device!r} is not available here; pass device='cpu'")
    return resolved


def resolve_dtype(dtype: Any, device: str | torch.device | None = None) -> torch.dtype:
    """The dtype to load a model in on ``device``: ``dtype`` itself, or the ``"auto"`` rule.

    ``dtype``: ``None`` or ``"auto"``, a name of ``DTYPES`` or a ``torch.dtype`` among them.
    """
    if dtype is None or dtype == "auto":
        dtype = os.environ.get(DTYPE_ENV) or "auto"
        if dtype == "auto":
            return _automatic(resolve_device(device))
    if isinstance(dtype, torch.dtype) and dtype in DTYPES.values():
        return dtype
    if isinstance(dtype, str) and dtype in DTYPES:
        return DTYPES[dtype]
    raise InvalidInputError(
        f"dtype {dtype!r} is not one citeformer loads models in; pass 'auto', "
        f"{', '.join(repr(name) for name in DTYPES)} or the torch dtype of one"
    )


def _automatic(device: torch.device) -> torch.dtype:
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if device.type == "cpu" and cpu_computes_bfloat16():
        return torch.bfloat16
    return torch.float32
