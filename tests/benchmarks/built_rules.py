"""The rules every built labeled set's questions follow (technical, api, paraphrase)."""

from __future__ import annotations

from citebench.data import Item
from citebench.metrics import contains_answer


def check_built_item(item: Item, *, chars: tuple[int, int] = (250, 700)) -> None:
    """3 to 6 passages ``p1..pN`` of ``chars`` (by default 250 to 700) characters without
    brackets; one or two gold passages, some holding the answer string; no other passage and not
    the question holds it."""
    ids = [p.id for p in item.passages]
    assert 3 <= len(ids) <= 6 and ids == [f"p{k}" for k in range(1, len(ids) + 1)]
    assert 1 <= len(item.gold_passages) <= 2 and item.gold_passages <= set(ids)
    for passage in item.passages:
        assert chars[0] <= len(passage.text) <= chars[1], passage.id
        assert "[" not in passage.text and "]" not in passage.text
    gold = [p for p in item.passages if p.id in item.gold_passages]
    others = [p for p in item.passages if p.id not in item.gold_passages]
    assert any(contains_answer(p.text, item.answer) for p in gold)
    assert not any(contains_answer(p.text, item.answer) for p in others)
    assert not contains_answer(item.question, item.answer)
