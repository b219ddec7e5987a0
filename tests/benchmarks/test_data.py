"""The labeled question sets: both load and split alike; the technical set keeps its rules."""

from __future__ import annotations

import pytest
from citebench.data import (
    DATASETS,
    Item,
    adversarial_items,
    load_dataset,
    load_items,
    split_of,
)

from citeformer.errors import InvalidInputError
from tests.benchmarks.built_rules import check_built_item


@pytest.mark.parametrize(("item_id", "split"), [
    ("q01", "dev"), ("q02", "test"), ("q03", "test"), ("q04", "dev"), ("q49", "dev"),
    ("t01", "dev"), ("t02", "test"), ("t64", "dev"),
])
def test_split_of_is_every_third_question_by_number(item_id: str, split: str) -> None:
    assert split_of(item_id) == split


@pytest.mark.parametrize("item_id", ["", "t", "01", "t01a"])
def test_split_of_refuses_an_id_without_a_number(item_id: str) -> None:
    with pytest.raises(InvalidInputError, match="has no number"):
        split_of(item_id)


def test_load_dataset_refuses_an_unknown_name() -> None:
    with pytest.raises(InvalidInputError, match="unknown dataset 'wiki'"):
        load_dataset("wiki")


def test_encyclopedic_set_is_the_default_file() -> None:
    assert [i.id for i in load_dataset("encyclopedic")] == [i.id for i in load_items()]
    assert len(load_items()) == 51


TECHNICAL = load_dataset("technical")


def test_technical_set_size_and_ids() -> None:
    assert len(TECHNICAL) >= 45
    assert [item.id for item in TECHNICAL] == [f"t{k:02d}" for k in range(1, len(TECHNICAL) + 1)]
    assert len({item.question for item in TECHNICAL}) == len(TECHNICAL)
    dev = [item for item in TECHNICAL if item.split == "dev"]
    assert [item.id for item in dev] == [f"t{k:02d}" for k in range(1, len(TECHNICAL) + 1, 3)]


@pytest.mark.parametrize("item", TECHNICAL, ids=lambda item: item.id)
def test_technical_question_follows_the_rules(item: Item) -> None:
    check_built_item(item)
    assert all(passage.title for passage in item.passages)


def test_technical_gold_passage_is_not_always_first() -> None:
    first = sum("p1" in item.gold_passages for item in TECHNICAL)
    assert 0 < first < len(TECHNICAL) / 2


def test_technical_set_holds_number_answers() -> None:
    numeric = [item for item in TECHNICAL if any(c.isdigit() for c in item.answer)]
    assert len(numeric) >= 10


def test_adversarial_variants_of_the_technical_set() -> None:
    attacked = adversarial_items(TECHNICAL, 3)
    assert len(attacked) == 6
    injected = [item for item in attacked if item.attack == "inject_99"]
    for item in injected:
        texts = [p.text for p in item.passages if "[99]" in p.text]
        assert len(texts) == 1


def test_every_dataset_file_exists() -> None:
    assert all(path.is_file() for path in DATASETS.values())
