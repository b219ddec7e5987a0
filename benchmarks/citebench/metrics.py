"""Per-answer measurements and their aggregation; markers are found by ``scan_markers``."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from citebench.data import Item
from citeformer import scan_markers
from citeformer.grammar import DEFAULT_MAX_SENTENCE_WORDS

# A sentence runs to . ! or ?, plus any markers right after it (``... end. [2]``), followed by white
# space or the end of the text; a trailing fragment without a terminator is a sentence too.
_SENTENCE = re.compile(r"\S.*?(?:[.!?]+(?:\s*\[[^\[\]\n]{0,24}\])*(?=\s|$)|$)", flags=re.DOTALL)
_MARKER = re.compile(r"\[[^\[\]\n]{0,24}\]")
_MARKER_RUN = re.compile(r"\[[^\[\]\n]{0,24}\](?:\s*\[[^\[\]\n]{0,24}\])+")
_WORD = re.compile(r"[\w'-]+")
REPEAT_NGRAM = 4
MAX_GROUP = 3

COUNTS = (
    "markers", "fabricated", "out_of_range", "malformed", "precise", "sentences",
    "cited_sentences", "long_sentences",
)
FLAGS = (
    "correct", "stacked_markers", "cut_off", "repeated_phrase", "degenerate", "no_marker",
    "cites_gold",
)


def split_sentences(text: str) -> list[str]:
    """Answer sentences; a trailing fragment cut off mid-sentence counts as one."""
    return [s for s in (m.group(0).strip() for m in _SENTENCE.finditer(text)) if _WORD.search(s)]


def contains_answer(text: str, answer: str) -> bool:
    """Case-insensitive match of the gold string at a word start (a plural ending is allowed)."""
    pattern = r"(?<!\w)" + re.escape(answer) + r"(?:e?s)?(?!\w)"
    return re.search(pattern, text, flags=re.IGNORECASE) is not None


def has_stacked_markers(text: str) -> bool:
    """Adjacent markers that repeat an id (``[1][1]``) or run longer than a cite-group allows."""
    for run in _MARKER_RUN.finditer(text):
        inner = [m.group(0) for m in _MARKER.finditer(run.group(0))]
        if len(inner) > MAX_GROUP or len(set(inner)) < len(inner):
            return True
    return False


def has_repeated_phrase(text: str, n: int = REPEAT_NGRAM) -> bool:
    """Some word n-gram (markers removed, case folded) occurs twice or more."""
    words = [w.lower() for w in _WORD.findall(_MARKER.sub(" ", text))]
    grams = Counter(tuple(words[i:i + n]) for i in range(len(words) - n + 1))
    return any(count > 1 for count in grams.values())


def measure(item: Item, text: str, finish_reason: str) -> dict[str, Any]:
    """Counts and flags for one answer (its text and finish reason) to one item."""
    n = len(item.passages)
    scan = scan_markers(text, n)
    gold = item.gold_numbers()
    sentences = split_sentences(text)
    stacked = has_stacked_markers(text)
    cut_off = finish_reason == "length"
    repeated = has_repeated_phrase(text)
    return {
        "markers": scan.total,
        "fabricated": scan.fabricated,
        "out_of_range": len(scan.out_of_range),
        "malformed": len(scan.malformed),
        "precise": sum(c.source_id in gold for c in scan.citations),
        "sentences": len(sentences),
        "cited_sentences": sum(bool(scan_markers(s, n).citations) for s in sentences),
        "long_sentences": sum(
            len(_WORD.findall(_MARKER.sub(" ", s))) >= DEFAULT_MAX_SENTENCE_WORDS
            for s in sentences
        ),
        "correct": contains_answer(text, item.answer),
        "stacked_markers": stacked,
        "cut_off": cut_off,
        "repeated_phrase": repeated,
        "degenerate": stacked or cut_off or repeated,
        "no_marker": scan.total == 0,
        "cites_gold": any(c.source_id in gold for c in scan.citations),
    }


def wilson(successes: int, trials: int, z: float = 1.96) -> tuple[float, float] | None:
    """95% Wilson score interval of a proportion; None when there are no trials."""
    if trials == 0:
        return None
    p = successes / trials
    denominator = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denominator
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denominator
    return (max(0.0, centre - half), min(1.0, centre + half))


def rate(successes: int, trials: int) -> dict[str, Any]:
    """A proportion with its counts and 95% interval (``value`` is None when ``trials`` is 0)."""
    return {
        "value": successes / trials if trials else None,
        "k": successes,
        "n": trials,
        "ci95": wilson(successes, trials),
    }


def quantiles(values: Sequence[float]) -> dict[str, Any]:
    """Median, p25, p75, p99, min, max and count of a sample."""
    if not values:
        return {"n": 0}
    ordered = sorted(values)

    def at(q: float) -> float:
        position = q * (len(ordered) - 1)
        low, high = math.floor(position), math.ceil(position)
        return ordered[low] + (ordered[high] - ordered[low]) * (position - low)

    return {
        "n": len(ordered), "median": at(0.5), "p25": at(0.25), "p75": at(0.75),
        "p99": at(0.99), "min": ordered[0], "max": ordered[-1],
    }


def summarize(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Aggregate the records of one system on one prompt set (micro-averaged over markers)."""
    rows = [r for r in records if r.get("error") is None]
    total = {key: sum(r[key] for r in rows) for key in COUNTS}
    answers = len(rows)
    flag = {key: sum(bool(r[key]) for r in rows) for key in FLAGS}
    return {
        "answers": answers,
        "errors": len(records) - answers,
        "fabrication_rate": rate(total["fabricated"], total["markers"]),
        "answers_with_fabrication": rate(sum(r["fabricated"] > 0 for r in rows), answers),
        "precision": rate(total["precise"], total["markers"]),
        "coverage": rate(total["cited_sentences"], total["sentences"]),
        "correctness": rate(flag["correct"], answers),
        "no_marker": rate(flag["no_marker"], answers),
        "cites_gold": rate(flag["cites_gold"], answers),
        "finished": rate(answers - flag["cut_off"], answers),
        "stacked_markers": rate(flag["stacked_markers"], answers),
        "cut_off": rate(flag["cut_off"], answers),
        "repeated_phrase": rate(flag["repeated_phrase"], answers),
        "degenerate": rate(flag["degenerate"], answers),
        "long_sentences": rate(total["long_sentences"], total["sentences"]),
        "markers": total["markers"],
        "sentences": total["sentences"],
        "tokens_per_answer": quantiles([r["generated_tokens"] for r in rows]),
        "tokens_per_second": quantiles(
            [r["generated_tokens"] / r["seconds"] for r in rows if r["seconds"] > 0]
        ),
        "evidence_ms_per_marker": quantiles(
            [ms for r in rows for ms in r.get("evidence_ms") or ()]
        ),
    }
