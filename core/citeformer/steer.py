"""Logits processors that steer the prose around the markers (see ``citeformer.readability``).

Each serves one sequence of one ``generate()`` call and runs after the grammar's and the quotes'
masks (``RawScores`` before them), removing tokens or moving probability among allowed ones only.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import torch
from transformers import LogitsProcessor

from citeformer.evidence import Evidence, LexicalEvidence, Support, claim_of
from citeformer.readability import Readability
from citeformer.types import Policy, Source

_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
# A word as the answer's readers count it: letters, digits, apostrophes and hyphens; a marker
# (``[2]``, ``[1, 3]``) is no word.
_WORD = re.compile(r"[\w'-]+")
_MARKER = re.compile(r"\[[^\[\]\n]{0,24}\]")
# Where the grammar starts a new sentence: after a cite-group and its terminator.
_SENTENCE_END = re.compile(r"\][.!?]")
# The end of a word a sentence can be cited after: a letter, digit or closing quote or bracket.
_ENDS_A_WORD = re.compile(r"[\w\"'`)\u2019\u201d]$")
_WORD_START = re.compile(r"([^\w'-]*)([\w'-]+)(.*)", flags=re.DOTALL)


class TokenClasses:
    """Which tokens end a sentence, open a marker, or begin with a digit; built once per vocab."""

    def __init__(self, decoded_vocab: Sequence[bytes]) -> None:
        self.vocab = list(decoded_vocab)
        """Raw bytes of every token, by token id."""
        self.enders = _ids(decoded_vocab, lambda raw: raw[:1] in (b".", b"!", b"?"))
        """Tokens that begin with a sentence terminator."""
        self.loud_enders = _ids(decoded_vocab, lambda raw: raw[:1] in (b"!", b"?"))
        """Tokens that begin with ``!`` or ``?``."""
        self.openers = _ids(decoded_vocab, lambda raw: raw.lstrip(b" ").startswith(b"["))
        """Tokens that open a marker (``[``, `` [``)."""
        digit_ids = _ids(decoded_vocab, lambda raw: raw.lstrip(b" ")[:1].isdigit())
        self.digit_ids = digit_ids
        """Tokens that begin (after spaces) with a digit."""
        texts = [decoded_vocab[i].decode("utf-8", errors="replace") for i in digit_ids.tolist()]
        self.digit_texts = texts
        """Their text."""
        self.glued_openers = _ids(decoded_vocab, lambda raw: re.search(rb"[,;:(] ?\[", raw))
        """Tokens that write a marker opener right after , ; : or ( themselves (``,[``)."""
        self.exempt = {
            token_id for token_id, raw in enumerate(decoded_vocab)
            if not raw or re.search(rb"[\[\]0-9]", raw)
        }
        """Tokens the repeat block never removes: markers, digits, special tokens."""
        decoded = [raw.decode("utf-8", errors="replace") for raw in decoded_vocab]
        self.word_parts = _word_parts(decoded)
        """Tokens by the (case-folded) word their text begins with: ``(id, glued, ends)``, where
        ``glued`` says the word part starts the token (it continues a word the answer ends in)
        and ``ends`` that the token closes that word itself."""
        self.word_closers = {
            token_id for token_id, text in enumerate(decoded)
            if text and "[" not in text and "]" not in text and not _WORD.match(text)
        }
        """Tokens that close a word the answer ends in (they begin with a space or punctuation),
        marker brackets left out."""

    _cache: dict[int, tuple[Any, TokenClasses]] = {}

    @classmethod
    def of(cls, tokenizer_info: Any) -> TokenClasses:
        """Cached per ``xgrammar.TokenizerInfo`` (kept alive by the cache entry)."""
        cached = cls._cache.get(id(tokenizer_info))
        if cached is None or cached[0] is not tokenizer_info:
            cached = (tokenizer_info, cls(tokenizer_info.decoded_vocab))
            cls._cache[id(tokenizer_info)] = cached
        return cached[1]


def _word_parts(texts: Sequence[str]) -> dict[str, list[tuple[int, bool, bool]]]:
    parts: dict[str, list[tuple[int, bool, bool]]] = {}
    for token_id, text in enumerate(texts):
        match = _WORD_START.match(text)
        if match is None or "[" in match.group(1):
            continue
        lead, word, rest = match.groups()
        parts.setdefault(word.lower(), []).append((token_id, not lead, bool(rest)))
    return parts


def _remove(scores: torch.FloatTensor, ids: torch.Tensor) -> torch.FloatTensor:
    """``scores`` with ``ids`` removed (-inf), unless that would leave no token at all."""
    ids = ids.to(scores.device)
    kept = scores[0, ids].clone()
    scores[0, ids] = float("-inf")
    if not torch.isfinite(scores).any():
        scores[0, ids] = kept
    return scores


def _ids(vocab: Sequence[bytes], keep: Any) -> torch.Tensor:
    return torch.tensor([i for i, raw in enumerate(vocab) if raw and keep(raw)], dtype=torch.long)


class RawScores(LogitsProcessor):
    """Keeps a copy of the model's own scores before any mask, for ``EndIntentProcessor``."""

    def __init__(self) -> None:
        self.scores: torch.Tensor | None = None

    def __call__(  # noqa: D102
        self, input_ids: torch.LongTensor, scores: torch.FloatTensor
    ) -> torch.FloatTensor:
        self.scores = scores.detach().clone()
        return scores


class _AnswerReader(LogitsProcessor):
    """Base of the processors that read the answer so far.

    ``generate`` calls them once on the prompt, then once per generated token, whose bytes
    ``_read`` appends.
    """

    def __init__(self, vocab: Sequence[bytes]) -> None:
        self._vocab = vocab
        self._generated = bytearray()
        self._started = False

    def _read(self, input_ids: torch.LongTensor) -> bytearray:
        if self._started:
            self._generated += self._vocab[int(input_ids[0, -1])]
        self._started = True
        return self._generated


class EndIntentProcessor(_AnswerReader):
    """Where the model wants to end a sentence the grammar does not let end, it opens a marker.

    Runs after every mask. ``raw`` holds the model's scores before the masks. When every
    sentence-ending token is masked, a marker opener is allowed, and the model put probability
    ``p_end`` on ending, the openers' logits are raised so that after the masks they carry their
    own probability plus ``p_end``. Under ``AUTO`` (ending allowed), ``support`` decides how much
    of ``p_end`` moves to the openers. ``required``: a sentence ends only right after its
    cite-group, so a ``.`` the grammar allows elsewhere continues a dotted term (``3`` to
    ``3.8``) and ending counts as masked there: the openers gain ``p_end`` beside the ``.``'s own
    share, and the model's doubt between ``Python 3 [1].`` and ``Python 3.8`` stays a doubt.
    """

    def __init__(
        self,
        raw: RawScores,
        tokens: TokenClasses,
        *,
        support: Support | None = None,
        threshold: float | None = None,
        required: bool = False,
    ) -> None:
        super().__init__(tokens.vocab)
        self._raw = raw
        self._tokens = tokens
        self._support = support
        self._threshold = threshold
        self._required = required

    def __call__(  # noqa: D102
        self, input_ids: torch.LongTensor, scores: torch.FloatTensor
    ) -> torch.FloatTensor:
        self._read(input_ids)
        raw = self._raw.scores
        if raw is None:
            return scores
        enders = self._tokens.enders.to(scores.device)
        openers = self._tokens.openers.to(scores.device)
        allowed_openers = openers[torch.isfinite(scores[0, openers])]
        if not len(allowed_openers):
            return scores
        probs = torch.softmax(raw[0].float(), dim=-1)
        p_end = float(probs[enders].sum())
        p_open = float(probs[allowed_openers].sum())
        if p_end <= 0 or p_open <= 0:
            return scores
        if self._required:
            ending_allowed = self._generated.endswith(b"]")
        else:
            ending_allowed = bool(torch.isfinite(scores[0, enders]).any())
        moved = self._auto_share(p_end) if ending_allowed else p_end
        if moved > 0:
            scores[0, allowed_openers] += math.log((p_open + moved) / p_open)
        return scores

    def _auto_share(self, p_end: float) -> float:
        if self._support is None or self._threshold is None:
            return 0.0
        text = self._generated.decode("utf-8", errors="replace")
        if text.rstrip().endswith("]"):
            return 0.0  # already cited
        claim = claim_of(text)
        if len(claim.split()) < 3:
            return 0.0
        best = max(self._support.scores(claim))
        if best <= self._threshold:
            return 0.0
        return p_end * min(1.0, (best - self._threshold) / (1 - self._threshold) * 2)


class CiteAfterWordProcessor(_AnswerReader):
    """Keeps a marker from opening right after ``,`` ``;`` ``:`` or ``(``.

    Only while another token remains, so the sentence is cited where a word ends.
    """

    def __init__(self, tokens: TokenClasses) -> None:
        super().__init__(tokens.vocab)
        self._tokens = tokens

    def __call__(  # noqa: D102
        self, input_ids: torch.LongTensor, scores: torch.FloatTensor
    ) -> torch.FloatTensor:
        ids = [self._tokens.glued_openers]
        if re.search(rb"[,;:(] ?$", self._read(input_ids)):
            ids.append(self._tokens.openers)
        return _remove(scores, torch.cat(ids))


class PeriodAfterMarkerProcessor(_AnswerReader):
    """After a cite-group, a sentence ends with ``.``: ``!`` and ``?`` are removed there.

    A small model used them as an escape to go on writing (``... [2]! This is not a typo, but
    ...``); a cited answer states, it does not exclaim or ask. Only while another token remains.
    """

    def __init__(self, tokens: TokenClasses) -> None:
        super().__init__(tokens.vocab)
        self._loud = tokens.loud_enders

    def __call__(  # noqa: D102
        self, input_ids: torch.LongTensor, scores: torch.FloatTensor
    ) -> torch.FloatTensor:
        if not self._read(input_ids).endswith(b"]"):
            return scores
        return _remove(scores, self._loud)


class RepeatBlockProcessor(LogitsProcessor):
    """Removes tokens that would repeat an n-gram of the answer; keeps at least one token."""

    def __init__(self, n: int, exempt: set[int]) -> None:
        self._n = n
        self._exempt = exempt
        self._answer: list[int] = []
        self._started = False

    def __call__(  # noqa: D102
        self, input_ids: torch.LongTensor, scores: torch.FloatTensor
    ) -> torch.FloatTensor:
        if self._started:
            self._answer.append(int(input_ids[0, -1]))
        self._started = True
        answer, n = self._answer, self._n
        if len(answer) < n - 1:
            return scores
        tail = answer[len(answer) - (n - 1):]
        blocked = {
            answer[i + n - 1]
            for i in range(len(answer) - n + 1)
            if answer[i:i + n - 1] == tail and answer[i + n - 1] not in self._exempt
        }
        if not blocked:
            return scores
        return _remove(scores, torch.tensor(sorted(blocked), dtype=torch.long))


class WordRepeatBlockProcessor(_AnswerReader):
    """Removes tokens that would make the answer say a word n-gram it has already said.

    Words are counted as a reader counts them (markers left out, case folded), so
    ``... the default encoding for strings [1]. It is the default encoding for ...`` is caught
    where a token n-gram block, fooled by a different split or a marker in between, is not. A
    token is removed when the word it begins, continues or closes would complete an n-gram that
    the answer already holds; the sources are never counted, ending the answer (``stop_ids``) is
    never blocked, and at least one token is kept.
    """

    def __init__(self, n: int, tokens: TokenClasses, stop_ids: Sequence[int] = ()) -> None:
        super().__init__(tokens.vocab)
        self._n = n
        self._parts = tokens.word_parts
        self._closers = tokens.word_closers - set(stop_ids)  # ending is always allowed

    def __call__(  # noqa: D102
        self, input_ids: torch.LongTensor, scores: torch.FloatTensor
    ) -> torch.FloatTensor:
        text = _MARKER.sub(" ", self._read(input_ids).decode("utf-8", errors="replace"))
        words = [w.lower() for w in _WORD.findall(text)]
        blocked: set[int] = set()
        if text and _WORD.fullmatch(text[-1]):
            # The answer ends inside a word: the next token continues it, or closes it and
            # perhaps begins the next one.
            *before, partial = words
            for word in self._said(before):
                if word == partial:
                    blocked |= self._closers
                elif word.startswith(partial):
                    blocked |= self._writing(word[len(partial):], glued=True)
            for word in self._said(words):
                blocked |= self._writing(word, glued=False)
        else:
            for word in self._said(words):
                blocked |= self._writing(word, glued=None)
        if not blocked:
            return scores
        return _remove(scores, torch.tensor(sorted(blocked), dtype=torch.long))

    def _said(self, words: list[str]) -> set[str]:
        """The words that followed the answer's last ``n - 1`` words where it wrote them before."""
        n = self._n
        context = words[len(words) - (n - 1):]
        if len(context) < n - 1:
            return set()
        return {
            words[i + n - 1] for i in range(len(words) - n + 1) if words[i:i + n - 1] == context
        }

    def _writing(self, word: str, *, glued: bool | None) -> set[int]:
        """Tokens that write ``word`` or may go on to it.

        A token's word part is the whole of it, or a start of it that the token leaves open.
        ``glued``: only tokens whose word part starts the token (``True``), only those after a
        space or punctuation (``False``), any (``None``).
        """
        found = set()
        for end in range(1, len(word) + 1):
            for token_id, starts, closes in self._parts.get(word[:end], ()):
                if glued is not None and starts != glued:
                    continue
                if end == len(word) or not closes:
                    found.add(token_id)
        return found


class NumberCopyProcessor(_AnswerReader):
    """Penalises digit tokens that write a number no source holds (outside markers)."""

    def __init__(
        self, tokens: TokenClasses, texts: Sequence[str], penalty: float
    ) -> None:
        super().__init__(tokens.vocab)
        self._tokens = tokens
        self._penalty = penalty
        numbers = {m.group(0) for text in texts for m in _NUMBER.finditer(text)}
        self._prefixes = {n[:i] for n in numbers for i in range(1, len(n) + 1)}
        self._numbers = numbers

    def __call__(  # noqa: D102
        self, input_ids: torch.LongTensor, scores: torch.FloatTensor
    ) -> torch.FloatTensor:
        text = self._read(input_ids).decode("utf-8", errors="replace")
        if text.rfind("[") > text.rfind("]"):
            return scores  # inside a marker: the grammar chooses its digits
        run = _trailing_number(text)
        bad = []
        for token_id, token in zip(
            self._tokens.digit_ids.tolist(), self._tokens.digit_texts, strict=True
        ):
            stripped = token.lstrip(" ")
            spaced = len(stripped) < len(token)
            lead = _NUMBER.match(stripped)
            digits = lead.group(0) if lead else ""
            number = digits if spaced or not run else run + digits
            whole = len(digits) < len(stripped)
            if (number in self._numbers) if whole else (number in self._prefixes):
                continue
            bad.append(token_id)
        if bad:
            ids = torch.tensor(bad, dtype=torch.long, device=scores.device)
            scores[0, ids] -= self._penalty
        return scores


class WrapUpProcessor(_AnswerReader):
    """Near the grammar's sentence bound, makes citing where a word ends the likely choice.

    A sentence that reaches ``bound`` words must take a marker whatever it last wrote, often a
    comma (``..., which means that the interpreter, [4].``). Once the sentence holds
    ``bound - words`` words, while the answer ends in a word, the marker openers gain ``bias``
    logits, and ``bias`` more with each further word, so the sentence is cited at a word end
    before the bound forces it mid-phrase.
    """

    def __init__(self, tokens: TokenClasses, bound: int, words: int, bias: float) -> None:
        super().__init__(tokens.vocab)
        self._openers = tokens.openers
        self._start = max(1, bound - words)
        self._bias = bias

    def __call__(  # noqa: D102
        self, input_ids: torch.LongTensor, scores: torch.FloatTensor
    ) -> torch.FloatTensor:
        text = self._read(input_ids).decode("utf-8", errors="replace")
        sentence = _SENTENCE_END.split(text)[-1].lstrip(" ")
        if "[" in sentence or not _ENDS_A_WORD.search(sentence):
            return scores
        past = sentence.count(" ") + 2 - self._start
        if past > 0:
            openers = self._openers.to(scores.device)
            scores[0, openers] += self._bias * past
        return scores


class EndBiasProcessor(_AnswerReader):
    """Raises the end-of-answer tokens right after a cited sentence, more with each one.

    ``every_sentence`` (``AUTO``, where a sentence need not be cited): after any sentence, by
    the number of sentences written, so an answer that cites little still stops when done.
    """

    def __init__(
        self, vocab: Sequence[bytes], stop_ids: Sequence[int], bias: float,
        *, every_sentence: bool = False,
    ) -> None:
        super().__init__(vocab)
        self._stop = torch.tensor(list(stop_ids), dtype=torch.long)
        self._bias = bias
        end = r"[.!?]" if every_sentence else r"\]\s*[.!?]"
        self._ends_here = re.compile(end + "$")
        self._ended = re.compile(end + r"(?:\s|$)")

    def __call__(  # noqa: D102
        self, input_ids: torch.LongTensor, scores: torch.FloatTensor
    ) -> torch.FloatTensor:
        text = self._read(input_ids).decode("utf-8", errors="replace").rstrip()
        if self._ends_here.search(text):
            ended = len(self._ended.findall(text))
            scores[0, self._stop.to(scores.device)] += self._bias * ended
        return scores


def _trailing_number(text: str) -> str:
    match = re.search(r"\d+(?:[.,]\d+)*[.,]?$", text)
    return match.group(0) if match else ""


def readability_processors(
    settings: Readability,
    policy: Policy,
    question: str,
    sources: Sequence[Source],
    tokenizer_info: Any,
    evidence: Evidence | None,
    stop_ids: Sequence[int] = (),
    sentence_words: int | None = None,
) -> tuple[list[LogitsProcessor], list[LogitsProcessor]]:
    """The processors of one constrained call: (before the masks, after the masks).

    ``sentence_words`` is the grammar's bound on a sentence's words (``max_sentence_words``).
    """
    tokens = TokenClasses.of(tokenizer_info)
    before: list[LogitsProcessor] = []
    after: list[LogitsProcessor] = []
    if settings.end_intent:
        raw = RawScores()
        before.append(raw)
        support = threshold = None
        if policy is Policy.AUTO and settings.auto_cite_support is not None:
            support = (evidence or LexicalEvidence()).bind(question, sources)
            threshold = settings.auto_cite_support
        after.append(EndIntentProcessor(
            raw, tokens, support=support, threshold=threshold,
            required=policy is Policy.REQUIRED,
        ))
    if not settings.cite_after_punctuation:
        after.append(CiteAfterWordProcessor(tokens))
    if settings.period_after_marker:
        after.append(PeriodAfterMarkerProcessor(tokens))
    if settings.number_penalty:
        texts = [question, *(s.text for s in sources)]
        after.append(NumberCopyProcessor(tokens, texts, settings.number_penalty))
    if settings.no_repeat_ngram:
        after.append(RepeatBlockProcessor(settings.no_repeat_ngram, tokens.exempt))
    if settings.no_repeat_words:
        after.append(WordRepeatBlockProcessor(settings.no_repeat_words, tokens, stop_ids))
    if settings.wrap_up_words and sentence_words and policy is Policy.REQUIRED:
        after.append(WrapUpProcessor(
            tokens, sentence_words, settings.wrap_up_words, settings.wrap_up_bias
        ))
    if settings.end_bias and stop_ids:
        after.append(EndBiasProcessor(
            tokens.vocab, stop_ids, settings.end_bias, every_sentence=policy is Policy.AUTO
        ))
    return before, after
