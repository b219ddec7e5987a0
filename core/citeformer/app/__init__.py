"""The ``citeformer`` command line, an application built on the library's public API.

Modules: ``cli`` (arguments, exit status), ``ask`` (the ``ask`` command), ``services`` (the
generator, embedder and warning sink it is given), ``documents`` (loading files), ``chunking``
(cutting text into passages), ``retrieval`` (top-k search), ``output`` (references, JSON) and
``errors`` (each with its exit status).
"""

from citeformer.app.ask import AskOptions, ask
from citeformer.app.cli import main
from citeformer.app.errors import AppError, InputError, Interrupted, UsageError
from citeformer.app.services import Services

__all__ = [
    "AppError",
    "AskOptions",
    "InputError",
    "Interrupted",
    "Services",
    "UsageError",
    "ask",
    "main",
]
