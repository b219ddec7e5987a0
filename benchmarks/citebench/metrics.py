"""Per-answer measurements and their aggregation; markers are found by ``scan_markers``."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from citebench.data import Item
from citeformer import scan_markers
from citeformer.evidence import LexicalEvidence, claim_before_marker
from citeformer.evidence.scoring import content_words
from citeformer.evidence.spans import WEAK_SUPPORT, locate_evidence
from citeformer.grammar import DEFAULT_MAX_SENTENCE_WORDS
from citeformer.grammar.markers import MARKER_LIKE, strip_markers

# A sentence runs to . ! or ?, plus any markers right after it (``... end. [2]``), followed by white
# space or the end of the text; a trailing fragment without a terminator is a sentence too.
_SENTENCE = re.compile(r"\S.*?(?:[.!?]+(?:\s*\[[^\[\]\n]{0,24}\])*(?=\s|$)|$)", flags=re.DOTALL)
_MARKER = MARKER_LIKE
_MARKER_RUN = re.compile(r"\[[^\[\]\n]{0,24}\](?:\s*\[[^\[\]\n]{0,24}\])+")
_CITE_GROUP = re.compile(r"\[[^\[\]\n]{0,24}\](?:\s*\[[^\[\]\n]{0,24}\])*")
_WORD = re.compile(r"[\w'-]+")
_LAST_WORD = re.compile(r"\w+$")
# A number: digits, with thousands commas ("1,889") or underscores ("100_000") and a decimal part;
# not the tail of a word or of another number ("x2", the "14" of "3.14").
_NUMBER = re.compile(r"(?<![\w.])\d+(?:(?:,\d{3})+(?!\d)|(?:_\d+)+)?(?:\.\d+)*")
# "Source 2" names a source by the prompt's numbering, the way a marker does: not a stated fact.
_SOURCE_NAME = re.compile(r"\bsources?\s+\d+", flags=re.IGNORECASE)
REPEAT_NGRAM = 4
REPETITION_NGRAM = 5
MAX_GROUP = 3
PUNCTUATION_BEFORE_GROUP = (",", ";", ":", "(")
# Four or more of one punctuation character in a row: a markup underline ("****", "====").
_PUNCTUATION_RUN = re.compile(r"""([!"#$%&'()*+,\-./:;<=>?@\\^_`{|}~])\1{3,}""")
FRAGMENT_WORDS = 2
# Words after which a phrase cannot end: a group right after one stands where a noun or clause
# should be ("a feature of [4]", "provided by the [1]").
DANGLING_WORDS = frozenset({
    "a", "an", "the", "of", "to", "in", "on", "at", "by", "for", "with", "from", "into", "and",
    "or", "but", "nor", "than", "as", "that", "which", "whose",
})

COUNTS = (
    "markers", "fabricated", "out_of_range", "malformed", "precise", "sentences",
    "cited_sentences", "long_sentences", "cite_groups", "groups_after_punctuation",
    "groups_after_dangling_word", "unsupported_numbers", "claim_best", "fragments",
    "punctuation_runs", "groups_in_open_spans",
)
FLAGS = (
    "correct", "stacked_markers", "cut_off", "repeated_phrase", "degenerate", "no_marker",
    "cites_gold", "repetition",
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


def _words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(_MARKER.sub(" ", text))]


def has_repeated_phrase(text: str, n: int = REPEAT_NGRAM) -> bool:
    """Some word n-gram (markers removed, case folded) occurs twice or more."""
    words = _words(text)
    grams = Counter(tuple(words[i:i + n]) for i in range(len(words) - n + 1))
    return any(count > 1 for count in grams.values())


def has_repetition(text: str, n: int = REPETITION_NGRAM) -> bool:
    """The answer says something twice: a word n-gram occurs twice, or a whole sentence does.

    Markers are removed and case folded first, so ``Paris [1]. Paris [2].`` repeats; the sentence
    rule catches repeated sentences shorter than ``n`` words.
    """
    if has_repeated_phrase(text, n):
        return True
    sentences = [tuple(_words(s)) for s in split_sentences(text)]
    return len(set(sentences)) < len(sentences)


def cite_groups(text: str) -> list[tuple[int, int]]:
    """(start, end) of each cite-group: one or more bracketed spans, white space between them."""
    return [m.span() for m in _CITE_GROUP.finditer(text)]


def follows_punctuation(text: str, start: int) -> bool:
    """Whether ``text[start:]`` comes right after ``,`` ``;`` ``:`` or ``(``, ignoring one space.

    A group placed there cites a clause that has not been said yet (``..., [4] which``) or hangs
    off an unfinished one (``as follows: [2]``).
    """
    before = text[:start]
    if before.endswith(" "):
        before = before[:-1]
    return before.endswith(PUNCTUATION_BEFORE_GROUP)


def groups_after_punctuation(text: str) -> int:
    """How many cite-groups of ``text`` follow ``,`` ``;`` ``:`` or ``(`` (see
    ``follows_punctuation``)."""
    return sum(follows_punctuation(text, start) for start, _ in cite_groups(text))


def groups_inside_open_spans(text: str) -> int:
    """How many cite-groups of ``text`` close a claim that leaves a parenthesis, a double quote
    or a backtick span open (``... (or any other type [1].``); a claim runs from the previous
    group or sentence end."""
    count, start = 0, 0
    for group_start, group_end in cite_groups(text):
        claim = re.split(r"[.!?]\s", text[start:group_start])[-1]
        count += (claim.count("(") > claim.count(")") or claim.count('"') % 2 == 1
                  or claim.count("`") % 2 == 1)
        start = group_end
    return count


def follows_dangling_word(text: str, start: int) -> bool:
    """Whether ``text[start:]`` comes right after a word a phrase cannot end with (an article,
    preposition or conjunction of ``DANGLING_WORDS``), ignoring white space: the group was placed
    where the sentence still needed its object."""
    last = _LAST_WORD.search(text[:start].rstrip())
    return last is not None and last.group(0).lower() in DANGLING_WORDS


def groups_after_dangling_word(text: str) -> int:
    """How many cite-groups of ``text`` follow a dangling word (see ``follows_dangling_word``)."""
    return sum(follows_dangling_word(text, start) for start, _ in cite_groups(text))


def punctuation_runs(text: str) -> int:
    """Runs of four or more of one ASCII punctuation character (``****``, ``====``)."""
    return len(_PUNCTUATION_RUN.findall(text))


def fragments(sentences: Sequence[str]) -> int:
    """Cited sentences of at most ``FRAGMENT_WORDS`` words before their first cite-group: a
    marker's carrier only (``The comparison [2][3].``)."""
    count = 0
    for sentence in sentences:
        group = _CITE_GROUP.search(sentence)
        if group and len(_WORD.findall(sentence[:group.start()])) <= FRAGMENT_WORDS:
            count += 1
    return count


def sentence_words(sentence: str) -> int:
    """Words of a sentence as the REQUIRED grammar counts them: runs of non-space characters,
    markers and bare punctuation (the terminator) left out."""
    return sum(bool(token.strip(".!?")) for token in _MARKER.sub(" ", sentence).split())


def reaches_word_bound(sentence: str, bound: int = DEFAULT_MAX_SENTENCE_WORDS) -> bool:
    """The sentence has ``bound`` words or more: under REQUIRED the grammar forced it to cite and
    end there (``max_sentence_words``)."""
    return sentence_words(sentence) >= bound


def numbers(text: str) -> set[str]:
    """The numbers written in ``text``, normalised: ``1,889`` and ``1_889`` are ``1889``, a
    decimal part is kept (``3.10`` is not ``3.1``), a sign is not part of the number.
    Markers and ``Source k`` names are not numbers."""
    text = _SOURCE_NAME.sub(" ", _MARKER.sub(" ", text))
    return {re.sub(r"[,_]", "", m.group(0)) for m in _NUMBER.finditer(text)}


def unsupported_numbers(text: str, sources: Iterable[str]) -> list[str]:
    """The distinct numbers of ``text`` that occur in none of ``sources``, sorted."""
    supported: set[str] = set()
    for source in sources:
        supported |= numbers(source)
    return sorted(numbers(text) - supported)


def claim_best(item: Item, text: str) -> int:
    """Markers whose source is among the best lexical matches of the claim they close alone.

    The claim is the text since the previous marker or sentence end; the question is left out,
    so this says how often a marker names a source the sentence's own words point to.
    """
    scan = scan_markers(text, len(item.passages))
    support = LexicalEvidence(question_weight=0).bind(item.question, item.sources())
    best = 0
    for citation in scan.citations:
        # The text up to this marker's "[" ends in an open group: the claim the marker cites.
        claim = claim_before_marker(text[: citation.start + 1])
        scores = support.scores(claim or "")
        best += scores[citation.source_id - 1] >= max(scores)
    return best


def unsupported_sentences(item: Item, sentences: Sequence[str]) -> int:
    """Sentences that no passage supports: what a sentence says beyond the question's own words
    (markers left out) has only a weak span in every passage (``locate_evidence``).

    Lexical, so a judge apart from the steering's measures. The question's words are left out
    because an answer restates its question ("The element that forms the bulk of the air we
    breathe is nitrogen"): what needs support is the rest ("nitrogen"). A sentence with nothing
    beyond the question's words ("It can do that") says nothing, and counts as unsupported, as
    does filler whose words no passage holds ("The above answer is correct").
    """
    asked = set(content_words(item.question))
    sources = item.sources()
    count = 0
    for sentence in sentences:
        said = " ".join(w for w in content_words(strip_markers(sentence)) if w not in asked)
        spans = [locate_evidence(said, source) for source in sources] if said else []
        best = max((span.score for span in spans if span is not None), default=0.0)
        count += best < WEAK_SUPPORT
    return count


def measure(item: Item, text: str, finish_reason: str) -> dict[str, Any]:
    """Counts and flags for one answer (its text and finish reason) to one item."""
    n = len(item.passages)
    scan = scan_markers(text, n)
    gold = item.gold_numbers()
    sentences = split_sentences(text)
    stacked = has_stacked_markers(text)
    cut_off = finish_reason == "length"
    repeated = has_repeated_phrase(text)
    invented = unsupported_numbers(text, [p.text for p in item.passages])
    return {
        "markers": scan.total,
        "fabricated": scan.fabricated,
        "out_of_range": len(scan.out_of_range),
        "malformed": len(scan.malformed),
        "precise": sum(c.source_id in gold for c in scan.citations),
        "sentences": len(sentences),
        "cited_sentences": sum(bool(scan_markers(s, n).citations) for s in sentences),
        "long_sentences": sum(reaches_word_bound(s) for s in sentences),
        "cite_groups": len(cite_groups(text)),
        "groups_after_punctuation": groups_after_punctuation(text),
        "groups_after_dangling_word": groups_after_dangling_word(text),
        "groups_in_open_spans": groups_inside_open_spans(text),
        "fragments": fragments(sentences),
        "punctuation_runs": punctuation_runs(text),
        "unsupported_numbers": len(invented),
        "unsupported_number_values": invented,
        "correct": contains_answer(text, item.answer),
        "stacked_markers": stacked,
        "cut_off": cut_off,
        "repeated_phrase": repeated,
        "repetition": has_repetition(text),
        "degenerate": stacked or cut_off or repeated,
        "no_marker": scan.total == 0,
        "cites_gold": any(c.source_id in gold for c in scan.citations),
        "claim_best": claim_best(item, text),
        "unsupported_sentences": unsupported_sentences(item, sentences),
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


def _unsupported(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Sentences no passage supports, over the answers that are not the refusal sentence (records
    written before the count was kept have none)."""
    answered = [r for r in rows if not r.get("abstained") and "unsupported_sentences" in r]
    sentences = sum(r["sentences"] for r in answered)
    unsupported = sum(r["unsupported_sentences"] for r in answered)
    return {
        "unsupported_sentences": rate(unsupported, sentences),
        "unsupported_per_answer": round(unsupported / len(answered), 3) if answered else None,
        "sentences_per_answer": round(sentences / len(answered), 3) if answered else None,
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
        "claim_best": rate(total["claim_best"], total["markers"]),
        "coverage": rate(total["cited_sentences"], total["sentences"]),
        "correctness": rate(flag["correct"], answers),
        "no_marker": rate(flag["no_marker"], answers),
        "cites_gold": rate(flag["cites_gold"], answers),
        # The refusal sentence instead of an answer (a record without the key did not refuse).
        "abstained": rate(sum(bool(r.get("abstained")) for r in rows), answers),
        "finished": rate(answers - flag["cut_off"], answers),
        "stacked_markers": rate(flag["stacked_markers"], answers),
        "cut_off": rate(flag["cut_off"], answers),
        "repeated_phrase": rate(flag["repeated_phrase"], answers),
        "degenerate": rate(flag["degenerate"], answers),
        "long_sentences": rate(total["long_sentences"], total["sentences"]),
        "repetition": rate(flag["repetition"], answers),
        "after_punctuation": rate(total["groups_after_punctuation"], total["cite_groups"]),
        "after_dangling_word": rate(total["groups_after_dangling_word"], total["cite_groups"]),
        "fragments": rate(total["fragments"], total["sentences"]),
        "open_spans": rate(total["groups_in_open_spans"], total["cite_groups"]),
        "punctuation_runs": total["punctuation_runs"],
        "unsupported_numbers": total["unsupported_numbers"],
        "answers_with_unsupported_number": rate(
            sum(r["unsupported_numbers"] > 0 for r in rows), answers
        ),
        **_unsupported(rows),
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


def rate_text(rate: Any) -> str:
    """A ``rate``'s value with two decimals, ``-`` where it has none (no trials); a count as is."""
    if isinstance(rate, int):
        return str(rate)
    if isinstance(rate, dict) and rate.get("value") is not None:
        return f"{rate['value']:.2f}"
    return "-"
