"""The ``citeformer`` command line, an application built on the library's public API.

Modules: ``cli`` (arguments, exit status), ``ask`` (the ``ask`` command), ``ask_many`` (``ask
--questions FILE``), ``questions`` (reading that file), ``services`` (the generator, embedder and
warning sink it is given), ``documents`` (loading files), ``html_text`` and ``pdf_text`` (the text
of HTML pages and PDF files), ``chunking`` (cutting text into passages), ``retrieval`` (top-k
search), ``index_cache`` (passage embeddings kept between runs), ``output`` (references with
their supporting sentences, JSON) and ``errors`` (each with its exit status).
"""

from citeformer.app.ask import AskOptions, ask
from citeformer.app.ask_many import ask_many
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
    "ask_many",
    "main",
]
