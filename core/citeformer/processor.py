"""Transformers logits processors: the grammar's mask, the quotes' mask, the evidence bias.

The citation grammar's mask comes first, then the verbatim quotes' mask, then the evidence bias
among the ids both allow. ``BatchLogitsProcessor`` does the same for every row of a left-padded
batch, each row under its own grammar, quotes and evidence.
"""

from __future__ import annotations

import re
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import xgrammar as xgr
from transformers import LogitsProcessor

from citeformer.errors import GrammarViolationError, InvalidInputError
from citeformer.evidence import CLOSED_GROUP, OPEN_GROUP, Support, claim_of
from citeformer.quotes import QuoteGuard


class GrammarLogitsProcessor(LogitsProcessor):
    """Masks logits with an xgrammar matcher; one instance serves one ``generate()`` call.

    Unlike ``xgrammar.contrib.hf.LogitsProcessor`` it raises (also under ``python -O``) when a
    sampled token is rejected, and skips the mask when the grammar allows every token.
    """

    def __init__(self, compiled_grammar: xgr.CompiledGrammar) -> None:
        self._matcher = xgr.GrammarMatcher(compiled_grammar)
        vocab_size = compiled_grammar.tokenizer_info.vocab_size
        self._bitmask = xgr.allocate_token_bitmask(1, vocab_size)
        self._prompt_length: int | None = None

    @property
    def matcher(self) -> xgr.GrammarMatcher:
        """The matcher, advanced by every accepted token."""
        return self._matcher

    def __call__(  # noqa: D102
        self, input_ids: torch.LongTensor, scores: torch.FloatTensor
    ) -> torch.FloatTensor:
        if input_ids.shape[0] != 1:
            raise InvalidInputError(
                f"GrammarLogitsProcessor handles one sequence at a time, got a batch of "
                f"{input_ids.shape[0]}; generate each answer separately"
            )
        if self._prompt_length is None:
            self._prompt_length = input_ids.shape[1]
        else:
            self.accept(int(input_ids[0, -1]))
        if self._matcher.fill_next_token_bitmask(self._bitmask):
            xgr.apply_token_bitmask_inplace(scores, self._bitmask.to(scores.device))
        return scores

    def accept(self, token_id: int) -> None:
        """Advance the grammar by one generated token, or raise if the grammar forbids it."""
        accept_token(self._matcher, token_id)


def accept_token(matcher: xgr.GrammarMatcher, token_id: int) -> None:
    """Advance ``matcher`` by one generated token, or raise if its grammar forbids the token."""
    if not matcher.accept_token(token_id):
        raise GrammarViolationError(
            f"token {token_id} was generated but the citation grammar forbids it here; "
            "the logits were not masked (was this processor passed to generate()?)"
        )


class QuoteLogitsProcessor(LogitsProcessor):
    """Keeps every quote verbatim: masks, after the grammar, tokens a ``QuoteGuard`` forbids.

    One instance serves one ``generate()`` call; place it after ``GrammarLogitsProcessor``.
    """

    def __init__(self, guard: QuoteGuard, stop_token_ids: Sequence[int]) -> None:
        self._guard = guard
        self._stop = frozenset(stop_token_ids)
        self._started = False

    def __call__(  # noqa: D102
        self, input_ids: torch.LongTensor, scores: torch.FloatTensor
    ) -> torch.FloatTensor:
        if self._started:
            token = int(input_ids[0, -1])
            if token not in self._stop:
                self._guard.advance(token)
        self._started = True
        mask = self._guard.mask()
        ids = torch.tensor(mask.ids, dtype=torch.long, device=scores.device)
        if mask.allow:
            removed = torch.ones(scores.shape[-1], dtype=torch.bool, device=scores.device)
            removed[ids] = False
            scores.masked_fill_(removed, float("-inf"))
        elif len(mask.ids):
            scores[:, ids] = float("-inf")
        if not torch.isfinite(scores).any():
            raise GrammarViolationError(
                "no token satisfies both the citation grammar and the verbatim quote here; "
                f"answer state {self._guard.state[0]!r}"
            )
        return scores


class IdTokens:
    """The tokens that can write part of a marker's id: those starting with a digit or ``]``.

    Built once per vocabulary from xgrammar's decoded vocabulary (raw bytes of every token).
    """

    def __init__(self, decoded_vocab: Sequence[bytes]) -> None:
        self.vocab = list(decoded_vocab)
        """Raw bytes of every token, by token id."""
        ids: list[int] = []
        digits: list[str] = []
        closed: list[bool] = []
        opens: list[bool] = []
        for token_id, raw in enumerate(decoded_vocab):
            if not raw or not (raw[:1].isdigit() or raw[:1] == b"]"):
                continue
            text = raw.decode("utf-8", errors="replace")
            lead = re.match(r"\d*", text).group(0)  # type: ignore[union-attr]
            ids.append(token_id)
            digits.append(lead)
            closed.append(len(lead) < len(text))
            opens.append(re.match(r"\]\s*\[", text[len(lead):]) is not None)
        self.token_ids = torch.tensor(ids, dtype=torch.long)
        self.openers = torch.tensor(
            [i for i, raw in enumerate(decoded_vocab) if raw.lstrip().startswith(b"[")],
            dtype=torch.long,
        )
        """Tokens that open a marker (``[``, `` [``)."""
        self.digits = digits
        """Leading digits of each token ("" for a token starting with ``]``)."""
        self.closed = closed
        """Whether something follows the digits, so that the token ends the id."""
        self.opens = opens
        """Whether the token also opens the next marker of the group (``][``)."""

    # TokenizerInfo is unhashable: keyed by id, with a weak reference to check the id's owner.
    _cache: dict[int, tuple[weakref.ref[Any], IdTokens]] = {}

    @classmethod
    def of(cls, tokenizer_info: Any) -> IdTokens:
        """Cached per ``xgrammar.TokenizerInfo``."""
        key = id(tokenizer_info)
        cached = cls._cache.get(key)
        if cached is None or cached[0]() is not tokenizer_info:
            cached = (weakref.ref(tokenizer_info), cls(tokenizer_info.decoded_vocab))
            cls._cache[key] = cached
        return cached[1]


class EvidenceLogitsProcessor(LogitsProcessor):
    """Adds ``weight * score`` to the logits of id tokens at an open marker; one per ``generate``.

    Place it after the grammar processor. Off a marker, it only appends the last token's bytes to
    its copy of the answer text. ``timings`` holds the seconds spent scoring at each marker.
    """

    def __init__(
        self,
        support: Support,
        weight: float,
        n_sources: int,
        id_tokens: IdTokens,
    ) -> None:
        self._support = support
        self._weight = weight
        self._n = n_sources
        self._id_tokens = id_tokens
        self._vocab = id_tokens.vocab
        self._generated = bytearray()
        self._prompt_length: int | None = None
        self._claim: str | None = None
        self._best_by_prefix: dict[str, float] = {}
        self.timings: list[float] = []

    def __call__(  # noqa: D102
        self, input_ids: torch.LongTensor, scores: torch.FloatTensor
    ) -> torch.FloatTensor:
        if self._prompt_length is None:
            self._prompt_length = input_ids.shape[1]
        else:
            self._generated += self._vocab[int(input_ids[0, -1])]
        opened = self._generated.rfind(b"[")
        if opened < 0:
            return scores
        closes = self._generated.count(b"]", opened)
        if closes == 0:
            text = self._generated.decode("utf-8", errors="replace")
            match = OPEN_GROUP.search(text)
            if match is not None:
                self._score(claim_of(text[: match.start()]))
                bias = self._bias(match.group(1))
                if bias is not None:
                    ids = self._id_tokens.token_ids.to(scores.device)
                    scores[:, ids] += bias.to(scores.device, scores.dtype)
        elif closes == 1 and self._generated.endswith(b"]"):
            # Right after ``[k]``: opening another marker is worth no more than the best source
            # still allowed after k, so a weaker source is not stacked after a strong one.
            text = self._generated.decode("utf-8", errors="replace")
            match = CLOSED_GROUP.search(text)
            if match is not None:
                self._score(claim_of(text[: match.start()]))
                best = self._best_by_prefix
                penalty = best["=" + match.group(1)] - best.get(">" + match.group(1), 0.0)
                if penalty > 0:
                    scores[:, self._id_tokens.openers.to(scores.device)] -= self._weight * penalty
        return scores

    def _score(self, claim: str) -> None:
        if claim == self._claim:
            return
        started = time.perf_counter()
        self._claim = claim
        self._best_by_prefix = self._prefix_scores(self._support.scores(claim))
        self.timings.append(time.perf_counter() - started)

    def _bias(self, prefix: str) -> torch.Tensor | None:
        best = self._best_by_prefix
        values = []
        tokens = self._id_tokens
        for digits, closed, opens in zip(tokens.digits, tokens.closed, tokens.opens, strict=True):
            spelled = prefix + digits
            if closed:
                # The token ends the id: only that exact id, if it is one.
                score = best.get("=" + spelled) if spelled else None
                if opens and score is not None:
                    # ``][`` also commits to citing a second, higher id: worth no more than the
                    # best of those, so a weaker source is not stacked after a strong one.
                    score = min(score, best.get(">" + spelled, 0.0))
            else:
                score = best.get(spelled)
            values.append(score if score is not None else 0.0)
        if not any(values):
            return None
        return torch.tensor(values) * self._weight

    def _prefix_scores(self, scores: Sequence[float]) -> dict[str, float]:
        # "12" -> best score of the ids spelled 12...; "=12" -> the score of id 12 itself;
        # ">12" -> the best score of the ids above 12. Scores are shifted so that the lowest is 0:
        # only the differences between sources matter.
        scores = list(scores[: self._n])
        low = min(scores)
        best: dict[str, float] = {}
        above = 0.0
        for number in range(len(scores), 0, -1):
            spelled = str(number)
            shifted = scores[number - 1] - low
            best["=" + spelled] = shifted
            best[">" + spelled] = above
            above = max(above, shifted)
            for end in range(1, len(spelled) + 1):
                key = spelled[:end]
                best[key] = max(best.get(key, 0.0), shifted)
        return best


@dataclass
class RowConstraints:
    """What constrains one sequence of a batch.

    ``before`` and ``after`` hold ordinary single-sequence logits processors (the quote mask, the
    evidence bias): each is called with this row's ids, left padding included, and its logits,
    as ``generate`` calls it for a sequence alone.
    """

    matcher: xgr.GrammarMatcher | None = None
    """The citation grammar's matcher (``None``: the row is unconstrained)."""

    before: Sequence[LogitsProcessor] = ()
    """Processors that see the row's logits before the grammar's mask."""

    after: Sequence[LogitsProcessor] = ()
    """Processors applied in order after the grammar's mask (quotes, then evidence)."""


class BatchLogitsProcessor(LogitsProcessor):
    """The masks and biases of a left-padded batch, each row under its own ``RowConstraints``.

    At each step every row still generating moves its matcher past the token it just produced
    (raising if the grammar forbids it); the matchers fill one bitmask, a row per sequence, in one
    call, and it is applied once; each row's own processors act on its logits before and after.
    A row that produced a stop token is finished: ``generate`` pads it from then on, and it is
    never fed to its matcher or processors again, nor masked. One instance serves one
    ``generate()`` call.
    """

    def __init__(
        self,
        rows: Sequence[RowConstraints],
        *,
        vocab_size: int,
        stop_token_ids: Sequence[int],
    ) -> None:
        self._rows = list(rows)
        self._stop = frozenset(stop_token_ids)
        self._bitmask = xgr.allocate_token_bitmask(len(self._rows), vocab_size)
        self._filler = xgr.BatchGrammarMatcher()
        self._live = list(range(len(self._rows)))
        self._started = False
        self.seconds: list[float] = []
        """Wall time of each step's work (grammar, masks, biases), in seconds."""

    @property
    def finished(self) -> list[bool]:
        """Whether each row has produced a stop token."""
        live = set(self._live)
        return [row not in live for row in range(len(self._rows))]

    def __call__(  # noqa: D102
        self, input_ids: torch.LongTensor, scores: torch.FloatTensor
    ) -> torch.FloatTensor:
        started = time.perf_counter()
        if input_ids.shape[0] != len(self._rows):
            raise InvalidInputError(
                f"BatchLogitsProcessor was built for {len(self._rows)} rows but generate() "
                f"passed {input_ids.shape[0]}; build one processor per batch"
            )
        last: list[int] = input_ids[:, -1].tolist() if self._started else []
        if self._started:
            self._live = [i for i in self._live if last[i] not in self._stop]
        for i in self._live:
            self._run(self._rows[i].before, i, input_ids, scores)
        grammars = [(i, m) for i in self._live if (m := self._rows[i].matcher) is not None]
        if grammars:
            if self._started:
                for i, matcher in grammars:
                    accept_token(matcher, last[i])
            rows = [i for i, _ in grammars]
            # One call fills every row (on several threads where the machine has them).
            self._filler.batch_fill_next_token_bitmask(
                [matcher for _, matcher in grammars], self._bitmask, indices=rows
            )
            xgr.apply_token_bitmask_inplace(
                scores, self._bitmask.to(scores.device), indices=rows
            )
        for i in self._live:
            self._run(self._rows[i].after, i, input_ids, scores)
        self._started = True
        self.seconds.append(time.perf_counter() - started)
        return scores

    @staticmethod
    def _run(
        processors: Sequence[LogitsProcessor],
        i: int,
        input_ids: torch.LongTensor,
        scores: torch.FloatTensor,
    ) -> None:
        # Views of row i: a processor that works in place writes into the batch's logits.
        ids, row = input_ids[i : i + 1], scores[i : i + 1]
        for processor in processors:
            result = processor(ids, row)
            if result is not row:
                row.copy_(result)
