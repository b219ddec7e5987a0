"""transformers' model modules imported without SciPy, its matcher still SciPy's on a call."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

pytest.importorskip("scipy")

DEFERRED = """
import json, sys
from citeformer.decoding.hf_imports import defer_scipy, linear_sum_assignment
defer_scipy()
defer_scipy()
import transformers.modeling_utils
from transformers.loss import loss_for_object_detection, loss_rt_detr
imported = "scipy" in sys.modules
bound = [module.linear_sum_assignment is linear_sum_assignment
         for module in (loss_for_object_detection, loss_rt_detr)]
rows, columns = loss_for_object_detection.linear_sum_assignment([[4, 1, 3], [2, 0, 5], [3, 2, 2]])
import scipy.optimize
print(json.dumps([imported, bound, rows.tolist(), columns.tolist(),
                  hasattr(scipy.optimize, "minimize")]))
"""

ALREADY = """
import json, scipy.optimize
from citeformer.decoding.hf_imports import defer_scipy
defer_scipy()
from transformers.loss import loss_for_object_detection
print(json.dumps(loss_for_object_detection.linear_sum_assignment
                 is scipy.optimize.linear_sum_assignment))
"""


def last_json(code: str) -> Any:
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120, check=True)
    return json.loads(result.stdout.splitlines()[-1])


def test_the_losses_load_without_scipy_and_match_with_it() -> None:
    imported, bound, rows, columns, real = last_json(DEFERRED)
    assert imported is False
    assert bound == [True, True]
    assert (rows, columns) == ([0, 1, 2], [1, 0, 2])  # the assignment of least cost: 1 + 2 + 2
    assert real is True  # the stand-in stepped aside: SciPy's own module imports after it


def test_nothing_is_deferred_where_scipy_is_imported_already() -> None:
    assert last_json(ALREADY) is True
