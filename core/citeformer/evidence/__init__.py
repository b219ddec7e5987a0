"""Evidence: which source supports a claim, and where in it.

The modules:

```text
scoring      Evidence scorers (lexical, embedding) that weigh every source against a claim
spans        the sentence or two of a cited source that best support its claim
refusal      grounded refusal: how well the sources support a question, and when the answer is
             "the sources do not answer this question"
embeddings   the bundled all-MiniLM-L6-v2 sentence embeddings (citeformer[retrieval])
```

The evidence lever that turns scores into logits lives with the other levers, in
``citeformer.decoding.levers``.
"""

from citeformer.evidence.refusal import (
    ASKING_WORDS,
    DEFAULT_REFUSAL_TEXT,
    DEFAULT_THRESHOLDS,
    SUPPORT_MEASURES,
    Band,
    Refusal,
    embedding_support,
    lexical_support,
    question_words,
)
from citeformer.evidence.scoring import (
    DEFAULT_EVIDENCE,
    EVIDENCE_NAMES,
    EmbeddingEvidence,
    Evidence,
    LexicalEvidence,
    Support,
    claim_before_marker,
    claim_of,
    content_words,
    resolve_evidence,
)
from citeformer.evidence.spans import WEAK_SUPPORT, locate_evidence, with_evidence

__all__ = [
    "ASKING_WORDS",
    "DEFAULT_EVIDENCE",
    "DEFAULT_REFUSAL_TEXT",
    "DEFAULT_THRESHOLDS",
    "EVIDENCE_NAMES",
    "SUPPORT_MEASURES",
    "WEAK_SUPPORT",
    "Band",
    "EmbeddingEvidence",
    "Evidence",
    "LexicalEvidence",
    "Refusal",
    "Support",
    "claim_before_marker",
    "claim_of",
    "content_words",
    "embedding_support",
    "lexical_support",
    "locate_evidence",
    "question_words",
    "resolve_evidence",
    "with_evidence",
]
