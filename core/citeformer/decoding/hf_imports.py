"""transformers' model modules imported without SciPy, which no text model calls.

``transformers.modeling_utils`` imports every loss function of the library, and six of its
object-detection losses run ``from scipy.optimize import linear_sum_assignment`` at import time
whenever SciPy is installed: about 0.4 s of SciPy for every model loaded, for a matcher that only
the training of DETR-style models calls. ``defer_scipy`` imports those losses first with SciPy's
``scipy.optimize`` standing aside, so that they bind a ``linear_sum_assignment`` that imports
SciPy's on its first call and returns what it returns.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
import types
from typing import Any

__all__ = ["defer_scipy", "linear_sum_assignment"]

_LOSSES = "transformers.loss.loss_utils"
_OPTIMIZE = "scipy.optimize"
_lock = threading.Lock()


def linear_sum_assignment(cost_matrix: Any, maximize: bool = False) -> Any:
    """``scipy.optimize.linear_sum_assignment``, imported on the first call."""
    from scipy.optimize import linear_sum_assignment as solve

    return solve(cost_matrix, maximize=maximize)


def defer_scipy() -> None:
    """Import transformers' losses with ``linear_sum_assignment`` deferred, unless already done.

    Call it before the first model is loaded. Nothing is done where the losses or SciPy's
    optimizers are imported already, or where transformers keeps its losses elsewhere.
    """
    with _lock:
        if _LOSSES in sys.modules or _OPTIMIZE in sys.modules:
            return
        if importlib.util.find_spec(_LOSSES) is None or importlib.util.find_spec("scipy") is None:
            return
        stand_in = _stand_in()
        sys.modules[_OPTIMIZE] = stand_in
        try:
            importlib.import_module(_LOSSES)
        finally:
            if sys.modules.get(_OPTIMIZE) is stand_in:
                del sys.modules[_OPTIMIZE]


def _stand_in() -> types.ModuleType:
    """A ``scipy.optimize`` whose ``linear_sum_assignment`` is the deferred one.

    Any other public name is SciPy's own: the stand-in steps aside and the real module is
    imported.
    """
    module = types.ModuleType(_OPTIMIZE)
    module.linear_sum_assignment = linear_sum_assignment  # type: ignore[attr-defined]

    def real(name: str) -> Any:
        if name.startswith("__"):  # the import system asking for __path__ and the like
            raise AttributeError(name)
        if sys.modules.get(_OPTIMIZE) is module:
            del sys.modules[_OPTIMIZE]
        return getattr(importlib.import_module(_OPTIMIZE), name)

    module.__getattr__ = real  # type: ignore[method-assign]
    return module
