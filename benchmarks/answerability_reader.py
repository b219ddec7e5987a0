"""An answerability reader: whether a passage states what a question asks, read with MiniLM.

A refusal measure studied, not shipped (benchmarks/README.md, "An answerability reader trained
here"): ``reader_support`` weighs a question by the largest probability, over the sources, that
one source answers it. For each (question, source) pair the reader takes the features
``FEATURES`` from one pass of citeformer's all-MiniLM-L6-v2 (frozen) over the question and the
sources, and a small head trained on generated questions gives the probability:

- token alignment (MaxSim, as in ColBERT): for each content token of the question, its largest
  cosine with a token of the source, as contextual MiniLM states; the mean and the least of
  those, over the whole source and over its best sentence (with the title);
- the pooled cosine of the question with the source (``embedding_support``'s), and with its
  closest sentence;
- word coverage: the share of the question's words (``question_words``) the source holds, and
  its best sentence holds, and the share of its key words (code spans, names, numbers).

The head chosen on the dev splits is kept in ``results/answerability_head.json`` (a few
kilobytes, with its version, how it was trained and its threshold), made by
``answerability_train.py`` from the questions of ``answerability_data.py``; ``answerability.py``
measures it beside every other refusal measure.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from citeformer.errors import ModelLoadError
from citeformer.evidence.embeddings import MiniLM, load_minilm
from citeformer.evidence.refusal import question_words
from citeformer.evidence.scoring import content_words
from citeformer.types import Source

HEAD = Path(__file__).resolve().parent / "results" / "answerability_head.json"

READER_VERSION = 1
"""The head file's ``version`` this code reads; a file of another version is refused."""
FEATURES = (
    "pooled_cosine", "maxsim_mean", "maxsim_min", "sentence_maxsim_mean", "sentence_maxsim_min",
    "sentence_cosine", "coverage", "sentence_coverage", "key_coverage", "has_keys",
    "question_words", "source_tokens",
    # The second set: soft coverage, the key words' and the title's alignment, named code.
    "aligned_share", "sentence_aligned_share", "key_maxsim_min", "title_maxsim_mean",
    "missing_words", "identifier_written",
)
"""What can be read of each (question, source) pair, in order (see the module); a head reads
the ones its weights name."""
ALIGNED = 0.7
"""A question token counts as aligned (``aligned_share``) at this cosine with a source token."""
_WORD = re.compile(r"[^\W_]+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
_CODE_SPAN = re.compile(r"`([^`]+)`")
# An identifier a question names in a code span: one with a dot or an underscore in it.
_IDENTIFIER = re.compile(r"`([^`]*[._][^`]*)`")


def key_words(question: str) -> set[str]:
    """The words that name what a question asks about.

    Those of its code spans and, outside them, its capitalized words but the first and its
    words with a digit (two characters or more).
    """
    keys = [w for span in _CODE_SPAN.findall(question) for w in _WORD.findall(span)]
    words = _WORD.findall(_CODE_SPAN.sub(" ", question))
    keys += [w for position, w in enumerate(words)
             if (position > 0 and w[0].isupper()) or any(c.isdigit() for c in w)]
    return {w for w in content_words(" ".join(keys)) if len(w) >= 2}


def _content_spans(text: str, words: set[str]) -> list[tuple[int, int]]:
    """The character spans of the words of ``text`` that are among ``words``."""
    spans = []
    for match in _WORD.finditer(text):
        counted = content_words(match.group())
        if counted and counted[0] in words:
            spans.append(match.span())
    return spans


def _sentences(text: str, start: int) -> list[tuple[int, int]]:
    """The character spans of the sentences of ``text[start:]`` (lines count as ends too)."""
    spans, begin = [], start
    for match in _SENTENCE_END.finditer(text, start):
        if text[begin:match.start()].strip():
            spans.append((begin, match.start()))
        begin = match.end()
    if text[begin:].strip():
        spans.append((begin, len(text)))
    return spans or [(start, len(text))]


def source_text(source: Source) -> str:
    """What MiniLM reads of a source: ``"title: text"``, as ``embedding_support`` does."""
    return f"{source.title}: {source.text}" if source.title else source.text


def _unit(rows: Any) -> Any:
    import numpy as np

    return rows / np.maximum(np.linalg.norm(rows, axis=-1, keepdims=True), 1e-9)


def pair_features(
    question: str,
    asked: tuple[Any, Any, Any],
    source: Source,
    read: tuple[Any, Any, Any],
    words: set[str],
) -> list[float]:
    """``FEATURES`` of one (question, source) pair.

    ``asked`` and ``read``: ``MiniLM.token_states`` of the question and of the source's text
    (``"title: text"``); ``words``: the question's words (``question_words``).
    """
    import numpy as np

    text = source_text(source)
    q_states, q_offsets, q_pooled = asked
    p_states, p_offsets, p_pooled = read
    spans = _content_spans(question, words)
    chosen = [i for i, (start, _) in enumerate(q_offsets)
              if any(a <= start < b for a, b in spans)]
    keys = key_words(question)
    key_spans = _content_spans(question, keys)
    keyed = [position for position, i in enumerate(chosen)
             if any(a <= q_offsets[i][0] < b for a, b in key_spans)]
    q_rows = _unit(q_states[chosen] if chosen else q_states)
    p_rows = _unit(p_states)
    similar = q_rows @ p_rows.T if len(p_rows) else np.zeros((len(q_rows), 1), np.float32)
    best = similar.max(axis=1)

    # Each sentence with the title (a sentence rarely repeats its passage's subject).
    title_end = len(source.title) + 1 if source.title else 0
    starts = p_offsets[:, 0] if len(p_offsets) else np.zeros(0)
    in_title = starts < title_end
    sentence_mean = sentence_min = sentence_cosine = -1.0
    sentence_cover = sentence_share = 0.0
    for begin, end in _sentences(text, title_end):
        inside = (starts >= begin) & (starts < end)
        if not inside.any():
            continue
        columns = inside | in_title
        aligned = similar[:, columns].max(axis=1)
        sentence_mean = max(sentence_mean, float(aligned.mean()))
        sentence_min = max(sentence_min, float(aligned.min()))
        sentence_share = max(sentence_share, float((aligned >= ALIGNED).mean()))
        pooled = _unit(p_states[inside].mean(axis=0))
        sentence_cosine = max(sentence_cosine, float(pooled @ _unit(q_states.mean(axis=0))))
        held = set(content_words(f"{source.title or ''} {text[begin:end]}"))
        if words:
            sentence_cover = max(sentence_cover, len(words & held) / len(words))
    if sentence_mean == -1.0:
        sentence_mean, sentence_min, sentence_cosine = (
            float(best.mean()), float(best.min()), float(q_pooled @ p_pooled))
        sentence_share = float((best >= ALIGNED).mean())

    held = set(content_words(f"{source.title or ''} {source.text}"))
    written = text.lower()
    named = [re.sub(r"\(\)$", "", name.strip()).lower() for name in _IDENTIFIER.findall(question)]
    return [
        float(q_pooled @ p_pooled),
        float(best.mean()),
        float(best.min()),
        sentence_mean,
        sentence_min,
        sentence_cosine,
        len(words & held) / len(words) if words else 1.0,
        sentence_cover if words else 1.0,
        len(keys & held) / len(keys) if keys else 1.0,
        1.0 if keys else 0.0,
        math.log1p(len(words)),
        math.log1p(len(p_states)),
        float((best >= ALIGNED).mean()),
        sentence_share,
        float(best[keyed].min()) if keyed else 1.0,
        float(similar[:, in_title].max(axis=1).mean()) if in_title.any() else 0.0,
        math.log1p(len(words - held)),
        float(all(re.search(r"(?<![\w.])" + re.escape(name) + r"(?!\w)", written)
                  for name in named)),
    ]


def token_states(model: MiniLM, texts: Sequence[str]) -> list[tuple[Any, Any, Any]]:
    """Per text, its tokens' last hidden states, their character spans and its embedding.

    One forward pass gives what ``MiniLM.encode`` gives (the third item, unit length) and the
    contextual state of every token (float32 rows, special tokens dropped) with its
    ``(start, end)`` span in the text.
    """
    import torch

    if not texts:
        return []
    with torch.inference_mode():
        batch = model.tokenizer(
            list(texts), padding=True, truncation=True, max_length=model.max_tokens,
            return_tensors="pt", return_offsets_mapping=True, return_special_tokens_mask=True,
        )
        offsets = batch.pop("offset_mapping").numpy()
        special = batch.pop("special_tokens_mask").numpy().astype(bool)
        tokens = model.model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).to(tokens.dtype)
        mean = (tokens * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
        pooled = torch.nn.functional.normalize(mean, p=2, dim=1).numpy()
        states = tokens.numpy()
    kept = batch["attention_mask"].numpy().astype(bool) & ~special
    return [(states[row][kept[row]], offsets[row][kept[row]], pooled[row])
            for row in range(len(texts))]


class Reader:
    """A trained head over some of ``FEATURES``.

    The features it reads are standardized, then weighed by a logistic regression or by one
    hidden layer of tanh units and a logistic output.
    """

    def __init__(self, weights: dict[str, Any]) -> None:
        import numpy as np

        if weights.get("version") != READER_VERSION:
            raise ModelLoadError(
                f"the answerability head is version {weights.get('version')!r}; this code "
                f"reads version {READER_VERSION}: retrain it with "
                "`python benchmarks/answerability_train.py`"
            )
        read = weights.get("features")
        if not isinstance(read, list) or not read or not set(read) <= set(FEATURES):
            raise ModelLoadError(
                f"the answerability head reads features {read!r}, not some of "
                f"{list(FEATURES)}: retrain it with `python benchmarks/answerability_train.py`"
            )
        self.columns = [FEATURES.index(name) for name in read]
        self.info = weights
        self.mean = np.asarray(weights["mean"], np.float32)
        self.scale = np.asarray(weights["scale"], np.float32)
        self.layers = [(np.asarray(w, np.float32), np.asarray(b, np.float32))
                       for w, b in weights["layers"]]

    def probability(self, features: Sequence[Sequence[float]]) -> Any:
        """The probability that each row's source answers its question.

        A row holds every feature of ``FEATURES``; the head reads the ones it was trained on.
        """
        import numpy as np

        rows = np.asarray(features, np.float32)[:, self.columns]
        hidden = (rows - self.mean) / self.scale
        for number, (weight, bias) in enumerate(self.layers):
            hidden = hidden @ weight + bias
            if number < len(self.layers) - 1:
                hidden = np.tanh(hidden)
        return 1.0 / (1.0 + np.exp(-hidden[:, 0]))


@functools.cache
def load_reader(path: Path = HEAD) -> Reader:
    """The head kept in ``path`` (by default the chosen one), read once per process."""
    try:
        weights = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ModelLoadError(
            f"the answerability head {path} cannot be read ({error}); make it with "
            "`python benchmarks/answerability_train.py`"
        ) from error
    return Reader(weights)


def source_features(question: str, sources: Sequence[Source]) -> list[list[float]]:
    """``pair_features`` of the question with each source, from one MiniLM pass."""
    asked, *read = token_states(load_minilm(), [question, *map(source_text, sources)])
    words = question_words(question)
    return [pair_features(question, asked, source, states, words)
            for source, states in zip(sources, read, strict=True)]


def reader_support(
    question: str, sources: Sequence[Source], reader: Reader | None = None
) -> float:
    """The largest probability, over ``sources``, that one of them answers ``question``.

    1.0 for a question without words to weigh (``question_words``), as ``lexical_support``;
    ``reader``: the head (by default ``load_reader()``).
    """
    if not question_words(question):
        return 1.0
    if not sources:
        return 0.0
    head = reader or load_reader()
    return float(head.probability(source_features(question, sources)).max())
