"""Real tokenizers of several families, from the vocab-only GGUF files in llama-cpp-python's sdist.

The sdist is fetched once with pip (about 77 MB), the three files are extracted, and each
tokenizer is saved in transformers' own format so later runs load it in well under a second.
``steering_kit`` gives what the steering core needs beside any tokenizer: its ``TokenizerKit``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from citeformer.decoding.tokenizer_kit import TokenizerKit
from citeformer.default_model import cache_dir

SDIST = "llama-cpp-python==0.3.36"
FAMILIES = {
    "gpt-2": "ggml-vocab-gpt-2.gguf",  # byte-level BPE: " [" and "][" and "]." are single tokens
    "llama-spm": "ggml-vocab-llama-spm.gguf",  # Llama 2 / Mistral SentencePiece: digits split
    "llama-bpe": "ggml-vocab-llama-bpe.gguf",  # Llama 3 BPE, 128k tokens
}


def steering_kit(tokenizer: Any) -> TokenizerKit:
    """The ``TokenizerKit`` of a transformers tokenizer; its end of sequence stops an answer."""
    return TokenizerKit(
        tokenizer, vocab_size=len(tokenizer), stop_token_ids=[tokenizer.eos_token_id]
    )


def family_tokenizer(family: str) -> Any:
    from transformers import AutoTokenizer

    saved = cache_dir() / "vocab" / f"tokenizer-{family}"
    if not (saved / "tokenizer_config.json").is_file():
        gguf = _gguf_file(FAMILIES[family])
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        # Saved beside, then renamed: a run reading the cache never meets a half-written one.
        beside = Path(tempfile.mkdtemp(dir=saved.parent, prefix=f".{saved.name}-"))
        tokenizer.save_pretrained(beside)
        try:
            beside.rename(saved)
        except OSError:
            if (saved / "tokenizer_config.json").is_file():  # another run saved it meanwhile
                shutil.rmtree(beside)
            else:  # what a stopped run left half-written
                shutil.rmtree(saved)
                beside.rename(saved)
    return AutoTokenizer.from_pretrained(saved)


def _gguf_file(name: str) -> Path:
    folder = cache_dir() / "vocab"
    target = folder / name
    if target.is_file():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as download:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
             "--no-binary", ":all:", SDIST, "-d", download],
            check=True,
        )
        (archive,) = Path(download).glob("llama_cpp_python-*.tar.gz")
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                filename = Path(member.name).name
                if filename in FAMILIES.values() and "vendor/llama.cpp/models" in member.name:
                    extracted = tar.extractfile(member)
                    assert extracted is not None
                    # Written beside and renamed: a run that has the file mapped (the GGUF
                    # reader maps it) keeps the old one; writing over it in place kills that
                    # run with a bus error.
                    part = folder / f".{filename}.{os.getpid()}.part"
                    part.write_bytes(extracted.read())
                    os.replace(part, folder / filename)
    if not target.is_file():
        raise FileNotFoundError(f"{name} is not in the {SDIST} sdist")
    return target
