"""The dtype and device a model is loaded in: names, the automatic rule, bad values named."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from citeformer import InvalidInputError
from citeformer.decoding import precision
from citeformer.decoding.precision import (
    DTYPE_ENV,
    cpu_computes_bfloat16,
    resolve_device,
    resolve_dtype,
)


@pytest.mark.parametrize(("given", "expected"), [
    ("float32", torch.float32), ("bfloat16", torch.bfloat16), ("float16", torch.float16),
    (torch.bfloat16, torch.bfloat16), (torch.float32, torch.float32),
])
def test_a_named_dtype_is_taken_as_given(given: object, expected: torch.dtype) -> None:
    assert resolve_dtype(given, "cpu") is expected


@pytest.mark.parametrize("native", [True, False])
def test_auto_on_a_cpu_is_bfloat16_only_where_the_cpu_computes_it(
    native: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(DTYPE_ENV, raising=False)
    monkeypatch.setattr(precision, "cpu_computes_bfloat16", lambda: native)
    expected = torch.bfloat16 if native else torch.float32
    assert resolve_dtype("auto", "cpu") is expected
    assert resolve_dtype(None, "cpu") is expected


def test_the_environment_replaces_auto(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DTYPE_ENV, "float32")
    monkeypatch.setattr(precision, "cpu_computes_bfloat16", lambda: True)
    assert resolve_dtype("auto", "cpu") is torch.float32
    assert resolve_dtype("bfloat16", "cpu") is torch.bfloat16  # a named dtype wins


def test_the_probe_reads_torchs_cpu_features() -> None:
    cpuinfo = Path("/proc/cpuinfo")
    if not cpuinfo.exists():
        pytest.skip("no /proc/cpuinfo to compare with")
    flags = set(cpuinfo.read_text().split())
    assert cpu_computes_bfloat16() == bool({"amx_tile", "avx512_bf16"} & flags)


@pytest.mark.parametrize(("given", "message"), [
    ("float64", "dtype 'float64' is not one citeformer loads"),
    (torch.int8, "dtype torch.int8 is not one"),
    ("half", "'bfloat16'"),
])
def test_a_dtype_citeformer_does_not_load_is_named(given: object, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        resolve_dtype(given, "cpu")


def test_devices() -> None:
    assert resolve_device("cpu") == torch.device("cpu")
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device(None).type == expected
    assert resolve_device("auto").type == expected
    with pytest.raises(InvalidInputError, match="device 'banana' is not a torch device"):
        resolve_device("banana")
    if not torch.cuda.is_available():
        with pytest.raises(InvalidInputError, match="asks for CUDA but this torch has no CUDA"):
            resolve_device("cuda:0")
    else:
        with pytest.raises(InvalidInputError, match="cuda:99.*has .* CUDA device"):
            resolve_device("cuda:99")
    if not torch.backends.mps.is_available():
        with pytest.raises(InvalidInputError, match="device 'mps' is not available here"):
            resolve_device("mps")
