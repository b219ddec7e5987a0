"""The levers: each one reads the answer so far and moves or removes probability in its logits.

Every lever steers one answer, after the grammar's and the quotes' masks: it reads the answer
from the ``AnswerState`` its row keeps (``citeformer.decoding.answer_state``: kept from each
token's characters alone and shared by every lever of the row; a lever reads a bounded tail of
it, the claim, the sentence or the last bytes, never the whole answer) and asks the step's
``StepEdits`` to remove tokens (keeping at least one) or to add finite values to some; the edits
of every row are then made together, in a few tensor operations over the batch
(``citeformer.decoding.edits``). So a token a mask removed stays removed: the 1..N guarantee and
verbatim quotes are untouched whatever the levers do. The settings behind the readability levers
are ``citeformer.readability.Readability``; ``EvidenceBias`` is the evidence scorer's
(``citeformer.evidence``).

The levers live by what they read: ``citeformer.decoding.lever`` (the interface),
``sentence_levers`` (where a sentence ends and is cited), ``written_levers`` (repeats, numbers
and names no source holds), ``evidence_bias`` (which source a marker names). ``levers_for``
lists the levers of one request, in the order they act.
"""

from __future__ import annotations

from collections.abc import Sequence

from citeformer.decoding.answer_state import AnswerState
from citeformer.decoding.evidence_bias import EvidenceBias
from citeformer.decoding.lever import CachedSupport, Lever, Removing
from citeformer.decoding.sentence_levers import (
    SUBORDINATORS,
    CiteAfterWord,
    CiteClosed,
    ClaimWords,
    ClauseEnd,
    EndBias,
    EndIntent,
    PeriodAfterMarker,
    PunctuationRun,
    WrapUp,
)
from citeformer.decoding.vocab import Vocabulary
from citeformer.decoding.written_levers import (
    CodeCopy,
    NumberCopy,
    RepeatBlock,
    WordRepeatBlock,
    _trailing_number,
)
from citeformer.evidence.scoring import Evidence, LexicalEvidence
from citeformer.readability import Readability
from citeformer.request import GenerationRequest
from citeformer.types import Policy

__all__ = [
    "SUBORDINATORS",
    "AnswerState",
    "CachedSupport",
    "CiteAfterWord",
    "CiteClosed",
    "ClaimWords",
    "ClauseEnd",
    "CodeCopy",
    "EndBias",
    "EndIntent",
    "EvidenceBias",
    "Lever",
    "NumberCopy",
    "PeriodAfterMarker",
    "PunctuationRun",
    "Removing",
    "RepeatBlock",
    "WordRepeatBlock",
    "WrapUp",
    "_trailing_number",
    "levers_for",
]


def levers_for(
    request: GenerationRequest,
    vocab: Vocabulary,
    stop_ids: Sequence[int],
    evidence: Evidence | None,
) -> list[Lever]:
    """The levers of one constrained request, in the order they act.

    ``evidence``: the scorer behind ``EvidenceBias`` (the request's own resolved against the
    generator's default), or ``None`` for none.
    """
    settings: Readability = request.readability
    policy = request.policy
    question, sources = request.question, request.sources
    # Bound once, each claim scored once: the levers that weigh a claim share the scores.
    bound = CachedSupport((evidence or LexicalEvidence()).bind(question, sources))
    levers: list[Lever] = []
    if settings.end_intent:
        support = threshold = None
        if policy is Policy.AUTO and settings.auto_cite_support is not None:
            support = bound
            threshold = settings.auto_cite_support
        levers.append(EndIntent(
            vocab, support=support, threshold=threshold, required=policy is Policy.REQUIRED,
            refusal=request.offered_refusal,
        ))
    if not settings.cite_after_punctuation:
        levers.append(CiteAfterWord(vocab))
    if settings.cite_closed:
        levers.append(CiteClosed(vocab))
    if settings.min_claim_words:
        levers.append(ClaimWords(vocab, settings.min_claim_words))
    if settings.clause_support is not None and policy is Policy.REQUIRED:
        levers.append(ClauseEnd(
            vocab, bound, question,
            threshold=settings.clause_support,
        ))
    if settings.period_after_marker:
        levers.append(PeriodAfterMarker(vocab))
    if settings.number_penalty:
        texts = [question, *(s.text for s in sources)]
        levers.append(NumberCopy(vocab, texts, settings.number_penalty))
    if settings.code_penalty:
        levers.append(CodeCopy(vocab, [question, *(s.text for s in sources)],
                               settings.code_penalty))
    if settings.no_repeat_ngram:
        levers.append(RepeatBlock(settings.no_repeat_ngram, vocab.exempt))
    if settings.no_repeat_words:
        levers.append(WordRepeatBlock(settings.no_repeat_words, vocab, stop_ids))
    if settings.max_punctuation_run:
        levers.append(PunctuationRun(vocab, settings.max_punctuation_run))
    sentence_words = request.grammar.max_sentence_words
    if settings.wrap_up_words and sentence_words and policy is Policy.REQUIRED:
        levers.append(WrapUp(vocab, sentence_words, settings.wrap_up_words, settings.wrap_up_bias))
    if settings.end_bias and stop_ids:
        levers.append(EndBias(stop_ids, settings.end_bias, every_sentence=policy is Policy.AUTO))
    if evidence is not None:
        levers.append(EvidenceBias(
            bound, evidence.weight, request.n_sources, vocab
        ))
    return levers
