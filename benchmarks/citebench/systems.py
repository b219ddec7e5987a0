"""The systems under comparison; all run the same model on the same items with greedy decoding.

- ``unconstrained``: citeformer's own REQUIRED-policy prompt, no grammar (``constrained=False``).
- ``llamaindex``: LlamaIndex's ``CITATION_QA_TEMPLATE`` filled with the sources numbered the way
  ``CitationQueryEngine`` numbers them (``Source 1:``), sent as the user turn of the chat template;
  citations are asked for in the prompt only.
- ``citeformer-<policy>``: ``CiteGenerator.generate`` with the grammar of each policy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from llama_index.core.query_engine.citation_query_engine import CITATION_QA_TEMPLATE

from citebench.data import Item
from citeformer import CitedAnswer, CiteGenerator, Policy

Runner = Callable[[CiteGenerator, Item, int], CitedAnswer]


@dataclass(frozen=True)
class System:
    name: str
    run: Runner
    constrained: bool


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
        return gen.generate(item.question, item.sources(), policy, max_new_tokens=max_new_tokens)

    return run


SYSTEMS: tuple[System, ...] = (
    System("unconstrained", _unconstrained, constrained=False),
    System("llamaindex", _llamaindex, constrained=False),
    *(System(f"citeformer-{p.value}", _citeformer(p), constrained=True) for p in Policy),
)
