"""llama.cpp in this process (llama-cpp-python), steered by citeformer as transformers is.

``LlamaCppGenerator`` is a ``CiteGenerator`` whose engine runs a GGUF model through
llama-cpp-python: the same prompt (rendered and tokenized by the model's HuggingFace tokenizer),
the same grammar (xgrammar over the same vocabulary, checked aligned with llama.cpp's own) and
the same steering (``citeformer.decoding.steering``), plugged into llama-cpp-python's
``logits_processor`` hook, which sees the model's own scores before any sampling. llama.cpp's
own grammar sampler is not used: xgrammar masks the logits there as it does in-process.

Needs ``llama-cpp-python`` (``pip install llama-cpp-python``; build it for your CPU as the
Makefile does). Rows of a batch are decoded one after another: llama-cpp-python's ``generate``
decodes one sequence.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers.generation.streamers import BaseStreamer

from citeformer.decoding.batching import Prepared, check_one_batch
from citeformer.decoding.engine import Decoded, DecodingEngine
from citeformer.decoding.steering import RowSteering, Steering
from citeformer.decoding.tokenizer_kit import (
    GRAMMAR_CACHE_SIZE,
    TokenizerKit,
    end_of_sequence_ids,
    kit_of,
)
from citeformer.errors import InvalidInputError, MissingDependencyError, TokenizerMismatchError
from citeformer.generator import CiteGenerator

__all__ = ["ALIGNMENT_PROBE", "LlamaCppEngine", "LlamaCppGenerator"]

ALIGNMENT_PROBE = "Paris is the capital [1][12]. Yes [3]: \"3.8\" ü, 1889-1890\n"
"""Text both tokenizers must split into the same ids for the grammar's mask to line up."""


class LlamaCppEngine(DecodingEngine):
    """A ``llama_cpp.Llama`` and the HuggingFace tokenizer of the same vocabulary."""

    def __init__(
        self,
        llama: Any,
        tokenizer: Any = None,
        *,
        kit: TokenizerKit | None = None,
        grammar_cache_size: int = GRAMMAR_CACHE_SIZE,
    ) -> None:
        """``llama`` and its ``tokenizer``, or ``kit`` shared with other engines of its vocabulary.

        A new kit ends answers at llama.cpp's end of sequence, then the tokenizer's, and keeps
        ``grammar_cache_size`` compiled grammars.
        """
        eos = int(llama.token_eos())
        super().__init__(
            kit_of(
                tokenizer, kit, vocab_size=int(llama.n_vocab()),
                stop_token_ids=lambda tokenizer: end_of_sequence_ids(eos, tokenizer.eos_token_id),
                grammar_cache_size=grammar_cache_size,
            ),
            context_length=int(llama.n_ctx()),
        )
        ours = list(self.tokenizer(ALIGNMENT_PROBE, add_special_tokens=False).input_ids)
        theirs = list(llama.tokenize(ALIGNMENT_PROBE.encode(), add_bos=False, special=False))
        if ours != theirs:
            raise TokenizerMismatchError(
                f"the tokenizer splits {ALIGNMENT_PROBE!r} into {ours} but llama.cpp into "
                f"{theirs}: the grammar's mask would not line up with the model's tokens; pass "
                "the HuggingFace tokenizer of this GGUF's vocabulary"
            )
        self.model = llama

    def run(
        self,
        rows: Sequence[Prepared],
        *,
        streamer: BaseStreamer | None = None,
        cancel: threading.Event | None = None,
    ) -> Decoded:
        """Generate every row, one after another (they must share their ``decoding_key``)."""
        check_one_batch(rows)
        generated: list[list[int]] = []
        seconds: list[float] = []
        for row in rows:
            ids, steps = self._generate(row, streamer, cancel)
            generated.append(ids)
            seconds += steps
        return Decoded(generated, seconds)

    def _generate(
        self, row: Prepared, streamer: Any, cancel: threading.Event | None
    ) -> tuple[list[int], list[float]]:
        # ``streamer`` follows transformers' protocol: the prompt's ids, then each token's.
        from llama_cpp import LogitsProcessorList

        request = row.request
        hook = None
        if request.constrained:
            hook = _SteeringHook(self.steering(row), len(row.prompt_ids), self.tokenizer_info)
        if request.do_sample:
            self.model.set_seed(request.seed if request.seed is not None else _fresh_seed())
            sampling = {"temp": request.temperature, "top_k": 0, "top_p": 1.0, "min_p": 0.0}
        else:
            sampling = {"temp": 0.0}
        if streamer is not None:
            streamer.put(torch.tensor(row.prompt_ids))
        stop = set(self.stop_token_ids)
        ids: list[int] = []
        tokens = self.model.generate(
            row.prompt_ids, repeat_penalty=1.0, typical_p=1.0,
            logits_processor=LogitsProcessorList([hook]) if hook is not None else None,
            **sampling,
        )
        for token in tokens:
            ids.append(int(token))
            if streamer is not None:
                streamer.put(torch.tensor([int(token)]))
            stopped = token in stop or len(ids) >= request.max_new_tokens
            if stopped or (cancel is not None and cancel.is_set()):
                break
        if streamer is not None:
            streamer.end()
        return ids, hook.seconds if hook is not None else []


class _SteeringHook:
    """llama-cpp-python's ``logits_processor``: one answer's steering, called at every step.

    llama-cpp-python calls it with every token so far (prompt included) and the next token's
    logits, before its sampler.
    """

    def __init__(self, steering: RowSteering, prompt_len: int, tokenizer_info: Any) -> None:
        self._steering = steering
        self._prompt_len = prompt_len
        self._fed = 0
        self._core = Steering(int(tokenizer_info.vocab_size))
        self.seconds: list[float] = []

    def __call__(self, input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        started = time.perf_counter()
        for token in input_ids[self._prompt_len + self._fed:].tolist():
            self._steering.advance(int(token))
            self._fed += 1
        logits = torch.from_numpy(np.ascontiguousarray(scores, dtype=np.float32)).unsqueeze(0)
        self._core.apply(logits, [(0, self._steering)])
        self.seconds.append(time.perf_counter() - started)
        return logits[0].numpy()


def _fresh_seed() -> int:
    return int(torch.randint(0, 2**31 - 1, ()).item())


class LlamaCppGenerator(CiteGenerator):
    """A ``CiteGenerator`` on llama.cpp in this process: the same API, answers and guarantee.

    Instantiate:
        ```python
        from citeformer.llama_cpp import LlamaCppGenerator
        gen = LlamaCppGenerator.default()              # the embedded SmolLM2-135M GGUF
        gen = LlamaCppGenerator.from_gguf("model.gguf", tokenizer="Org/Model", n_threads=4)
        ```

    Invoke, stream, batch: as ``CiteGenerator`` (``generate``, ``stream``, ``generate_batch``,
    ``answer_batch``); a batch's rows are decoded one after another.
    """

    def __init__(self, llama: Any, tokenizer: Any) -> None:
        super().__init__(engine=LlamaCppEngine(llama, tokenizer))

    @classmethod
    def from_pretrained(cls, name_or_path: str, **model_kwargs: Any) -> CiteGenerator:
        """Not for llama.cpp, which loads GGUF files: use ``from_gguf`` or ``default``."""
        raise InvalidInputError(
            f"LlamaCppGenerator loads GGUF files: use LlamaCppGenerator.from_gguf(path, "
            f"tokenizer=...) instead of from_pretrained({name_or_path!r})"
        )

    @classmethod
    def from_gguf(
        cls, path: str | Path, *, tokenizer: Any = None, n_ctx: int = 2048, **llama_kwargs: Any
    ) -> LlamaCppGenerator:
        """Load a GGUF file (``llama_kwargs`` go to ``llama_cpp.Llama``).

        ``tokenizer`` is its HuggingFace tokenizer (or a hub id or folder), by default read from
        the GGUF file itself.
        """
        try:
            import llama_cpp
        except ImportError as error:
            raise MissingDependencyError(
                "LlamaCppGenerator needs llama-cpp-python: pip install llama-cpp-python"
            ) from error
        from transformers import AutoTokenizer

        path = Path(path)
        if tokenizer is None:
            tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        elif isinstance(tokenizer, (str, Path)):
            tokenizer = AutoTokenizer.from_pretrained(str(tokenizer))
        llama_kwargs.setdefault("verbose", False)
        llama = llama_cpp.Llama(model_path=str(path), n_ctx=n_ctx, **llama_kwargs)
        return cls(llama, tokenizer)

    @classmethod
    def default(cls, **llama_kwargs: Any) -> LlamaCppGenerator:
        """The embedded SmolLM2-135M-Instruct GGUF, its tokenizer from citeformer's cache."""
        from transformers import AutoTokenizer

        from citeformer.default_model import cache_folder, check_cache, gguf_path, load_default

        gguf = gguf_path()
        folder = cache_folder(gguf)
        if check_cache(folder) is not None:
            load_default(progress=False)  # writes (or repairs) the folder
        tokenizer = AutoTokenizer.from_pretrained(str(folder))
        return cls.from_gguf(gguf, tokenizer=tokenizer, **llama_kwargs)
