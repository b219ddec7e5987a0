"""benchmarks/evidence_candidates.py: the claims markers cite, where sources lie, the table."""

from __future__ import annotations

import pytest
from evidence_candidates import cited_claims, source_spans, summarize

from citeformer import Policy, Source
from citeformer.prompt import build_messages, render_prompt
from tests.tiny import tiny_tokenizer


def test_each_marker_cites_the_claim_before_it_and_a_stacked_one_the_same() -> None:
    text = "Paris is in France [1][3]. It has 2.1 million residents [2]."
    assert [(k, claim) for k, claim, _ in cited_claims(text, 3)] == [
        (1, "Paris is in France"), (3, "Paris is in France"),
        (2, "It has 2.1 million residents"),
    ]
    assert [head for *_, head in cited_claims(text, 3)][-1] == (
        "Paris is in France [1][3]. It has 2.1 million residents"
    )


@pytest.mark.parametrize("title", ["Nile", None])
def test_source_spans_are_the_call_s_sources_not_the_worked_example_s(title: str | None) -> None:
    # The worked example's first source opens with "The Nile": so does this call's second.
    sources = [Source("Rivers are long.", title=title), Source("The Nile is about 6,650 km long")]
    prompt = render_prompt(build_messages("How long?", sources, Policy.REQUIRED), tiny_tokenizer())
    spans = source_spans(prompt, sources)
    assert [prompt[a:b] for a, b in spans] == [s.text for s in sources]
    assert spans[0][0] > prompt.index("The Nile is about 6,650 km long and flows")


def test_the_table_counts_where_each_way_ranks_a_gold_source_first() -> None:
    marker = {"dataset": "d", "gold": [2], "chosen": 1, "lexical": [0.9, 0.1],
              "likelihood": [-30.0, -5.0], "attention": [0.1, 0.3]}
    table = summarize([marker, {**marker, "chosen": 2}], ["d", "unused"])
    assert list(table) == ["d"]
    line = table["d"]
    assert line["markers"] == 2 and line["chosen"] == 0.5
    assert line["lexical"] == 0.0 and line["likelihood"] == 1.0 and line["attention"] == 1.0
    assert line["lexical+1*likelihood(T=8)"] == 1.0  # a 25-nat margin outweighs 0.8 of lexical
    assert line["lexical+0.5*attention"] == 0.0  # 0.75 - 0.25 of the attention, halved: 0.25
