"""Where exactly: the sentence or two of a cited source that best support the claim cited.

A marker says which source; ``locate_evidence`` says where in it. The claim is the text the marker
ends (since the previous marker or sentence end, as ``citeformer.evidence.scoring`` delimits it);
the candidates are each sentence of the source and each pair of adjacent sentences; the score is
lexical support: the IDF-weighted share of the claim's content words that a candidate contains, IDF
over the source's sentences. It needs no logits, so local and served answers get the same spans; it
is not entailment (a sentence can share the words of a claim it contradicts).
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from collections.abc import Sequence

from citeformer.evidence.scoring import claim_of, content_words
from citeformer.types import Citation, EvidenceSpan, Source

__all__ = ["PAIR_GAIN", "WEAK_SUPPORT", "locate_evidence", "sentence_spans", "with_evidence"]

WEAK_SUPPORT = 0.35
"""Below this score a span is flagged ``weak``: the cited source has no sentence that shares
much of the claim's wording (set from the benchmark set: see benchmarks/README.md)."""

PAIR_GAIN = 0.15
"""A pair of sentences is chosen over its better sentence only when it scores this much more."""

# A sentence ends at . ! or ? followed by white space, at a full-width 。！？ (Chinese and
# Japanese put no space after them), or at a paragraph break.
_BREAK = re.compile(r"(?<=[.!?])[\"')\]]*\s+|(?<=[。！？])[」』）]*\s*|\n\s*\n")
_GROUP_GAP = re.compile(r"\s*")
# What ends in a full stop without ending a sentence: a clause or list label standing alone
# ("3.", "4.2.", "(b)", "iv."), and the abbreviations that run on ("e.g.", "Dr.", "No. 5").
_LABEL = re.compile(r"\(?(?:\d{1,3}(?:\.\d{1,3})*|[a-z]|[ivxlc]{1,6})[.)]", re.IGNORECASE)
_LEADING_LABEL = re.compile(rf"{_LABEL.pattern}\s+", re.IGNORECASE)
_LAST_WORD = re.compile(r"(?:^|\s)(\S{1,8})$")  # searched in the 9 characters before the stop
_RUNS_ON = frozenset({
    "e.g.", "i.e.", "cf.", "vs.", "viz.", "approx.", "mr.", "mrs.", "ms.", "dr.", "prof.",
    "st.", "no.", "nos.", "art.", "arts.", "sec.", "secs.", "para.", "fig.", "figs.", "vol.",
    "p.", "pp.", "ch.", "cl.", "ref.", "resp.",
})


@functools.lru_cache(maxsize=256)
def sentence_spans(text: str) -> tuple[tuple[int, int], ...]:
    """(start, end) offsets of the sentences of ``text``, white space trimmed; linear time.

    A clause's number stays with its clause (``3. Notice. Either party ...`` holds the sentences
    ``3. Notice.`` and ``Either party ...``, never ``3.`` alone after the clause before, even
    where a page break parts them), and an abbreviation's full stop (``e.g.``, ``No.``) ends no
    sentence; a paragraph break otherwise always does.
    """
    spans: list[tuple[int, int]] = []
    start = 0
    for match in _BREAK.finditer(text):
        end = match.start() + len(match.group(0).rstrip())
        if _runs_on(text, start, end, paragraph=match.group(0).count("\n") >= 2):
            continue
        _add(text, start, end, spans)
        start = match.end()
    _add(text, start, len(text), spans)
    return tuple(spans)


def _runs_on(text: str, start: int, end: int, *, paragraph: bool) -> bool:
    """Whether the break at ``end`` leaves the sentence begun at ``start`` open.

    A label standing alone runs on even over a paragraph (or PDF page) break; an abbreviation
    only within its paragraph.
    """
    if end - start <= 24 and _LABEL.fullmatch(text[start:end].strip()):
        return True
    if paragraph:
        return False
    word = _LAST_WORD.search(text[max(start, end - 9):end])
    return word is not None and word.group(1).lower().lstrip("(\"'") in _RUNS_ON


def _add(text: str, start: int, end: int, spans: list[tuple[int, int]]) -> None:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    if start < end:
        spans.append((start, end))


@functools.lru_cache(maxsize=256)
def _sentence_words(text: str) -> tuple[tuple[frozenset[str], ...], dict[str, float]]:
    # A clause's number is no word of it: "3." must not support a claim about 3 months.
    words = tuple(
        frozenset(content_words(_LEADING_LABEL.sub("", text[s:e], count=1)))
        for s, e in sentence_spans(text)
    )
    counts = Counter(word for sentence in words for word in sentence)
    n = len(words)
    return words, {word: math.log(1 + n / df) for word, df in counts.items()}


def locate_evidence(claim: str, source: Source, *, question: str = "") -> EvidenceSpan | None:
    """The one or two adjacent sentences of ``source`` that best support ``claim``.

    A claim with no content word (``"It is so [1]."``) is located by the question's words; ``None``
    when neither has any, or the source has no sentence.
    """
    text = source.text
    sentences, idf = _sentence_words(text)
    if not sentences:
        return None
    wanted = set(content_words(claim)) or set(content_words(question))
    if not wanted:
        return None
    unseen = math.log(1 + len(sentences))  # a word no sentence holds counts fully against
    # In word order, not set order: the same floats, and the same ties, in every process.
    weights = {word: idf.get(word, unseen) for word in sorted(wanted)}
    total = sum(weights.values())

    def score(words: frozenset[str]) -> float:
        return sum(weight for word, weight in weights.items() if word in words) / total

    singles = [score(words) for words in sentences]
    best = max(range(len(singles)), key=lambda i: (singles[i], -i))
    first, last, value = best, best, singles[best]
    for i in range(len(sentences) - 1):
        pair = score(sentences[i] | sentences[i + 1])
        if pair >= max(singles[i], singles[i + 1]) + PAIR_GAIN and pair > value:
            first, last, value = i, i + 1, pair
    spans = sentence_spans(text)
    start, end = spans[first][0], spans[last][1]
    return EvidenceSpan(start, end, text[start:end], value, value < WEAK_SUPPORT)


def with_evidence(
    text: str, citations: Sequence[Citation], sources: Sequence[Source], question: str
) -> tuple[Citation, ...]:
    """``citations`` of ``text`` with their ``evidence`` located.

    The markers of one group (``[1][2]``) cite the same claim: the text before the group.
    """
    located = []
    group_start = 0
    previous_end = -1
    for citation in citations:
        if previous_end < 0 or _GROUP_GAP.fullmatch(text, previous_end, citation.start) is None:
            group_start = citation.start
        previous_end = citation.end
        claim = claim_of(text[:group_start])
        span = locate_evidence(claim, sources[citation.source_id - 1], question=question)
        located.append(Citation(citation.source_id, citation.start, citation.end, span))
    return tuple(located)
