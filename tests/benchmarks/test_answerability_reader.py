"""The answerability reader studied in ``benchmarks/answerability*.py``: its features, its head."""

from __future__ import annotations

import json
import math

import answerability_reader as answerability
import numpy as np
import pytest
from answerability_reader import (
    FEATURES,
    HEAD,
    READER_VERSION,
    Reader,
    key_words,
    load_reader,
    pair_features,
    reader_support,
)

from citeformer import ModelLoadError, Source
from citeformer.evidence.refusal import question_words


def weights(**changes: object) -> dict[str, object]:
    """A logistic head that reads only the first feature, with weight 2 and bias -1."""
    head: dict[str, object] = {
        "version": READER_VERSION, "features": list(FEATURES),
        "mean": [0.0] * len(FEATURES), "scale": [1.0] * len(FEATURES),
        "layers": [[[[2.0]] + [[0.0]] * (len(FEATURES) - 1), [-1.0]]],
    }
    return head | changes


def states(vectors: list[list[float]], spans: list[tuple[int, int]]) -> tuple[object, ...]:
    """Token states as ``MiniLM.token_states`` gives them, from hand-made vectors."""
    rows = np.asarray(vectors, np.float32)
    pooled = rows.mean(axis=0)
    return rows, np.asarray(spans), pooled / np.linalg.norm(pooled)


# -- the head ------------------------------------------------------------------------------------


def test_a_head_reads_only_the_features_it_names() -> None:
    head = weights(features=["maxsim_min"], mean=[0.0], scale=[1.0], layers=[[[[2.0]], [-1.0]]])
    row = [9.0] * len(FEATURES)
    row[FEATURES.index("maxsim_min")] = 0.5
    assert Reader(head).probability([row]).tolist() == pytest.approx([0.5])


def test_a_logistic_head_gives_the_sigmoid_of_its_standardized_sum() -> None:
    reader = Reader(weights())
    rows = [[0.5] + [9.0] * (len(FEATURES) - 1), [2.0] + [0.0] * (len(FEATURES) - 1)]
    assert reader.probability(rows).tolist() == pytest.approx([0.5, 1 / (1 + math.exp(-3))])


def test_a_hidden_layer_is_read_through_tanh() -> None:
    width = len(FEATURES)
    head = weights(layers=[[[[1.0, -1.0]] + [[0.0, 0.0]] * (width - 1), [0.0, 0.0]],
                           [[[1.0], [1.0]], [0.0]]])
    # tanh(x) + tanh(-x) = 0 whatever the first feature: a probability of one half.
    assert Reader(head).probability([[3.0] * width]).tolist() == pytest.approx([0.5])


@pytest.mark.parametrize(("changes", "message"), [
    ({"version": 99}, "head is version 99; this code reads version 1"),
    ({"features": ["pooled_cosine", "entailment"]},
     r"reads features \['pooled_cosine', 'entailment'\], not some of"),
])
def test_weights_of_another_version_or_layout_are_refused_by_name(changes, message) -> None:
    with pytest.raises(ModelLoadError, match=message):
        Reader(weights(**changes))


def test_the_kept_head_is_small_versioned_calibrated_and_reads_its_features() -> None:
    kept = json.loads(HEAD.read_text(encoding="utf-8"))
    assert len(HEAD.read_bytes()) < 20_000
    assert kept["version"] == READER_VERSION and set(kept["features"]) <= set(FEATURES)
    assert 0 < kept["threshold"] < 1
    assert kept["trained"]["data"]["questions"] == 1350
    reader = load_reader()
    assert reader is load_reader()  # read once
    row = [0.0] * len(FEATURES)
    for name, value in zip(kept["features"], kept["mean"], strict=True):
        row[FEATURES.index(name)] = value
    # At the training mean, the logistic head gives the sigmoid of its bias.
    assert reader.probability([row])[0] == pytest.approx(
        1 / (1 + math.exp(-kept["layers"][-1][1][0])), rel=1e-5)


def test_a_head_that_cannot_be_read_names_its_file(tmp_path) -> None:
    broken = tmp_path / "head.json"
    broken.write_text("{", encoding="utf-8")
    with pytest.raises(ModelLoadError, match=r"head .*head.json cannot be read .*make it with"):
        load_reader(broken)


# -- the features --------------------------------------------------------------------------------


def test_key_words_are_code_names_and_numbers() -> None:
    assert key_words("What did `textwrap.fill` return in Python before 2024?") == {
        "textwrap", "fill", "python", "2024"}
    assert key_words("What is the capital of peru?") == set()


def test_a_source_holding_the_questions_tokens_aligns_fully_and_covers_its_words() -> None:
    question = "capital peru"
    asked = states([[1, 0, 0], [0, 1, 0]], [(0, 7), (8, 12)])
    source = Source("Lima is the capital of Peru.", title="Lima")
    # "Lima: Lima is the capital of Peru.": tokens for the title, "capital" and "Peru".
    read = states([[0, 0, 1], [1, 0, 0], [0, 1, 0]], [(0, 4), (18, 25), (29, 33)])
    row = dict(zip(FEATURES, pair_features(question, asked, source, read,
                                           question_words(question)), strict=True))
    assert row["maxsim_mean"] == pytest.approx(1.0) and row["maxsim_min"] == pytest.approx(1.0)
    assert row["sentence_maxsim_min"] == pytest.approx(1.0)
    assert row["coverage"] == 1.0 and row["sentence_coverage"] == 1.0
    assert row["has_keys"] == 0.0 and row["key_coverage"] == 1.0


def test_a_near_miss_aligns_only_the_words_it_shares() -> None:
    question = "capital peru"
    asked = states([[1, 0, 0], [0, 1, 0]], [(0, 7), (8, 12)])
    source = Source("Quito is the capital of Ecuador.", title="Quito")
    read = states([[0, 0, 1], [1, 0, 0], [0, 0, 1]], [(0, 5), (19, 26), (30, 37)])
    row = dict(zip(FEATURES, pair_features(question, asked, source, read,
                                           question_words(question)), strict=True))
    assert row["maxsim_mean"] == pytest.approx(0.5) and row["maxsim_min"] == pytest.approx(0.0)
    assert row["coverage"] == 0.5


# -- the measure ---------------------------------------------------------------------------------


def test_a_question_with_nothing_to_weigh_is_never_refused_and_loads_nothing(monkeypatch) -> None:
    monkeypatch.setattr(answerability, "source_features", lambda *_: pytest.fail("weighed"))
    assert reader_support("Summarize the documents.", [Source("Anything at all.")]) == 1.0


def test_support_is_the_likeliest_source(monkeypatch) -> None:
    firsts = iter([[[0.0] + [0.0] * (len(FEATURES) - 1), [1.0] + [0.0] * (len(FEATURES) - 1)]])
    monkeypatch.setattr(answerability, "source_features", lambda *_: next(firsts))
    sources = [Source("The Eiffel Tower was completed in 1889."), Source("Bees dance.")]
    # sigmoid(2 * 1 - 1) for the second source beats sigmoid(-1) for the first.
    assert reader_support("When was the tower built?", sources, Reader(weights())) == (
        pytest.approx(1 / (1 + math.exp(-1))))
    assert reader_support("When was the tower built?", [], Reader(weights())) == 0.0


# -- the real reader (all-MiniLM-L6-v2 and the shipped head) -------------------------------------

BRIDGE = "When did the Golden Gate Bridge open to traffic?"
OPENED = Source("The Golden Gate Bridge opened to traffic in May 1937, after four years of work.",
                title="Golden Gate Bridge")
PAINTED = Source("The Golden Gate Bridge is painted a color called International Orange.",
                 title="Golden Gate Bridge")
BROOKLYN = Source("The Brooklyn Bridge opened in 1883 and crosses the East River.",
                  title="Brooklyn Bridge")
HONEY = Source("Honey bees tell each other where flowers are with a waggle dance.", title="Bees")


@pytest.mark.integration
def test_the_reader_prefers_the_passage_that_answers_to_near_misses() -> None:
    answered = reader_support(BRIDGE, [PAINTED, OPENED, BROOKLYN])
    near_misses = reader_support(BRIDGE, [PAINTED, BROOKLYN])
    off_topic = reader_support(BRIDGE, [HONEY])
    print(f"answered {answered:.3f}, near misses {near_misses:.3f}, off topic {off_topic:.3f}")
    assert answered > near_misses > off_topic
    threshold = json.loads(HEAD.read_text(encoding="utf-8"))["threshold"]
    assert answered >= threshold > off_topic
    # The features of one source do not depend on the others beside it.
    alone = answerability.source_features(BRIDGE, [OPENED])[0]
    assert answerability.source_features(BRIDGE, [HONEY, OPENED])[1] == pytest.approx(
        alone, abs=1e-4)
