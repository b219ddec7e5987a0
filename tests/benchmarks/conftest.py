"""The benchmark code lives in ``benchmarks/`` (``citebench``, ``run.py``), not in a package."""

from __future__ import annotations

import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
for folder in (BENCHMARKS, BENCHMARKS / "data"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
