"""The systems under comparison; all run the same model on the same items with greedy decoding.

- ``unconstrained``: citeformer's own REQUIRED-policy prompt, no grammar (``constrained=False``).
- ``llamaindex``: LlamaIndex's ``CITATION_QA_TEMPLATE`` filled with the sources numbered the way
  ``CitationQueryEngine`` numbers them (``Source 1:``), sent as the user turn of the chat template;
  citations are asked for in the prompt only.
- ``citeformer-<policy>``: ``CiteGenerator.generate`` with the grammar of each policy and no
  evidence (``evidence=None``): the model alone chooses each id.
- ``citeformer-required+<scorer>``: REQUIRED with evidence reweighting of the id at each marker
  (``citeformer.evidence``; ``+lexical`` is what ``generate`` does by default), timed per marker.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from llama_index.core.query_engine.citation_query_engine import CITATION_QA_TEMPLATE

from citebench.data import Item
from citeformer import CitedAnswer, CiteGenerator, Policy, Source
from citeformer.evidence import EVIDENCE_NAMES, Evidence, Support

Runner = Callable[[CiteGenerator, Item, int], CitedAnswer]


class TimedEvidence(Evidence):
    """An evidence scorer that records the seconds of each scoring (one per new claim cited)."""

    def __init__(self, inner: Evidence) -> None:
        super().__init__(weight=inner.weight)
        self.inner = inner
        self.name = inner.name
        self.timings: list[float] = []

    def bind(self, question: str, sources: Sequence[Source]) -> Support:
        return _TimedSupport(self.inner.bind(question, sources), self.timings)

    def drain(self) -> list[float]:
        """The timings recorded since the last call, in milliseconds."""
        taken = [1e3 * t for t in self.timings]
        self.timings.clear()
        return taken


class _TimedSupport(Support):
    def __init__(self, inner: Support, timings: list[float]) -> None:
        self._inner = inner
        self._timings = timings

    def scores(self, claim: str) -> list[float]:
        started = time.perf_counter()
        result = self._inner.scores(claim)
        self._timings.append(time.perf_counter() - started)
        return result


@dataclass(frozen=True)
class System:
    name: str
    run: Runner
    constrained: bool
    evidence: TimedEvidence | None = field(default=None, compare=False)


def _unconstrained(gen: CiteGenerator, item: Item, max_new_tokens: int) -> CitedAnswer:
    return gen.generate(
        item.question, item.sources(), Policy.REQUIRED,
        max_new_tokens=max_new_tokens, constrained=False,
    )


def llamaindex_prompt(item: Item) -> str:
    """What ``CitationQueryEngine`` sends: ``Source k:`` chunks joined as its synthesizer does."""
    chunks = [f"Source {k}:\n{p.text}\n".strip() for k, p in enumerate(item.passages, 1)]
    return CITATION_QA_TEMPLATE.format(context_str="\n\n".join(chunks), query_str=item.question)


def _llamaindex(gen: CiteGenerator, item: Item, max_new_tokens: int) -> CitedAnswer:
    return generate_from_user_turn(gen, llamaindex_prompt(item), item, max_new_tokens)


def generate_from_user_turn(
    gen: CiteGenerator, user_turn: str, item: Item, max_new_tokens: int
) -> CitedAnswer:
    """Unconstrained generation from an arbitrary user turn, through citeformer's own decode path,
    so that decoding, stop tokens and answer parsing are identical to the other systems."""
    text = gen.tokenizer.apply_chat_template(
        [{"role": "user", "content": user_turn}], tokenize=False, add_generation_prompt=True
    )
    return gen.generate(item.question, item.sources(), prompt=text, constrained=False,
                        max_new_tokens=max_new_tokens)


def _citeformer(policy: Policy) -> Runner:
    def run(gen: CiteGenerator, item: Item, max_new_tokens: int) -> CitedAnswer:
        return gen.generate(item.question, item.sources(), policy, max_new_tokens=max_new_tokens,
                            evidence=None)

    return run


def _with_evidence(evidence: TimedEvidence) -> Runner:
    def run(gen: CiteGenerator, item: Item, max_new_tokens: int) -> CitedAnswer:
        return gen.generate(item.question, item.sources(), Policy.REQUIRED,
                            max_new_tokens=max_new_tokens, evidence=evidence)

    return run


def _evidence_system(name: str) -> System:
    evidence = TimedEvidence(EVIDENCE_NAMES[name]())
    return System(f"citeformer-required+{name}", _with_evidence(evidence), constrained=True,
                  evidence=evidence)


SYSTEMS: tuple[System, ...] = (
    System("unconstrained", _unconstrained, constrained=False),
    System("llamaindex", _llamaindex, constrained=False),
    *(System(f"citeformer-{p.value}", _citeformer(p), constrained=True) for p in Policy),
    *(_evidence_system(name) for name in EVIDENCE_NAMES),
)
