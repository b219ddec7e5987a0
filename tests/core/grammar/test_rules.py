"""Accept/reject tables for each policy, checked with xgrammar's own parser."""

from __future__ import annotations

import functools

import pytest
import xgrammar as xgr
from xgrammar.testing import _is_grammar_accept_string

from citeformer import GrammarOptions, Policy, build_grammar, build_request
from citeformer.grammar import (
    MAX_MARKER_SLOTS,
    MAX_TERM_CHARS,
    MAX_TERMS,
    OPTION_LIMITS,
    dotted_terms,
    marker_grammar,
)


@functools.cache
def _grammar(n: int, policy: Policy, **options: object) -> xgr.Grammar:
    return xgr.Grammar.from_ebnf(build_grammar(n, policy, **options))


def accepts(text: str, n: int, policy: Policy, **options: object) -> bool:
    return bool(_is_grammar_accept_string(_grammar(n, policy, **options), text))


REQUIRED = [
    ("Paris is the capital [1].", True),
    ("Paris is the capital of France [1]. Berlin is in Germany [2]!", True),
    ("Paris is the capital[1].", True),
    ("Is it Paris [3]?", True),
    ("Paris [1][2][3].", True),
    ("Paris, France: 2.1 million [1].", False),  # "." inside a word ends a sentence uncited
    ("Paris [7].", False),  # no source 7
    ("Paris [0].", False),
    ("Paris [01].", False),
    ("Paris [1][1].", False),  # a group never names a source twice
    ("Paris [2][1].", False),  # ids increase inside a group
    ("Paris [1][2][3][1].", False),
    ("Paris [1] [2].", False),  # a group is written back to back
    ("Paris [1, 2].", False),
    ("Paris [a].", False),
    ("Paris.", False),  # every sentence cites
    ("Paris [1]", False),  # and ends with a terminator
    ("Paris is the capital. It is big [1].", False),
    ("[1].", False),  # a sentence has words
    ("Paris ] is [1].", False),
    ("", False),
]

QUOTES_ONLY = [
    ('He called it "a turning point" [2].', True),
    ('He called it "a turning point"[2].', True),
    ("Paris is the capital of France.", True),  # prose need not cite
    ("Paris is the capital of France [1].", True),  # but may
    ('"Quoted" [1] and "again" [3]', True),
    ('He called it "a turning point".', False),  # a quote must cite
    ('He called it "a turning point" [4].', False),
    ("Paris [1][1].", False),
    ("Paris [1] [2] [3].", False),  # groups cannot stack
    ("Paris [9].", False),
    ("", False),
]

AUTO = [
    ("Paris is the capital of France.", True),
    ("Paris is the capital of France [1].", True),
    ("Paris [1]. Berlin [2][3].", True),
    ('He said "hi" [1].', True),
    ("Paris [4].", False),
    ("Paris [1][1].", False),
    ("Paris [1] [2].", False),  # no stacked groups: prose between needs a letter or digit
    ("[1] Paris.", False),  # a marker follows something it supports
    ("Paris [x].", False),
    ("Paris ] here.", False),
    ("", False),
]


@pytest.mark.parametrize(("text", "expected"), REQUIRED)
def test_required(text: str, expected: bool) -> None:
    assert accepts(text, 3, Policy.REQUIRED) is expected


@pytest.mark.parametrize(("text", "expected"), QUOTES_ONLY)
def test_quotes_only(text: str, expected: bool) -> None:
    assert accepts(text, 3, Policy.QUOTES_ONLY) is expected


@pytest.mark.parametrize(("text", "expected"), AUTO)
def test_auto(text: str, expected: bool) -> None:
    assert accepts(text, 3, Policy.AUTO) is expected


@pytest.mark.parametrize("policy", list(Policy))
def test_every_id_in_range_and_none_beyond(policy: Policy) -> None:
    n = 12
    for k in range(1, n + 1):
        assert accepts(f"Paris is here [{k}].", n, policy), k
    for k in (0, 13, 21, 100, 120):
        assert not accepts(f"Paris is here [{k}].", n, policy), k


@pytest.mark.parametrize("policy", list(Policy))
def test_large_n_keeps_multidigit_ids_apart(policy: Policy) -> None:
    assert accepts("Paris [999][1000].", 1000, policy)
    assert not accepts("Paris [1001].", 1000, policy)
    assert not accepts("Paris [1000][999].", 1000, policy)


def test_sentence_bound_lands_on_a_word_boundary() -> None:
    words = " ".join(["word"] * 5)
    assert accepts(f"{words} [1].", 3, Policy.REQUIRED, max_sentence_words=5)
    assert not accepts(f"{words} more [1].", 3, Policy.REQUIRED, max_sentence_words=5)
    assert accepts("abcd [1].", 3, Policy.REQUIRED, max_word_chars=4)
    assert not accepts("abcde [1].", 3, Policy.REQUIRED, max_word_chars=4)


def test_group_size_option() -> None:
    assert accepts("Paris [1][2].", 3, Policy.AUTO, max_group=2)
    assert not accepts("Paris [1][2][3].", 3, Policy.AUTO, max_group=2)


def test_quote_length_option() -> None:
    assert accepts('"abc" [1]', 3, Policy.QUOTES_ONLY, max_quote_chars=3)
    assert not accepts('"abcd" [1]', 3, Policy.QUOTES_ONLY, max_quote_chars=3)


@pytest.mark.parametrize("n", [1, 10, 100, 1000])
@pytest.mark.parametrize("policy", list(Policy))
def test_grammar_parses_for_any_n(policy: Policy, n: int) -> None:
    assert xgr.Grammar.from_ebnf(build_grammar(n, policy)) is not None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n_sources": 0}, "n_sources must be a positive int, got 0"),
        ({"n_sources": 2.0}, "n_sources must be a positive int, got 2.0"),
        ({"n_sources": True}, "n_sources must be a positive int, got True"),
        ({"n_sources": 3, "max_group": 0}, "max_group must be a positive int"),
        ({"n_sources": 3, "policy": "sometimes"}, "unknown citation policy 'sometimes'"),
    ],
)
def test_bad_arguments_are_named(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        build_grammar(**kwargs)  # type: ignore[arg-type]


def test_policy_accepts_names_in_any_case() -> None:
    assert build_grammar(2, "QUOTES_ONLY") == build_grammar(2, Policy.QUOTES_ONLY)
    assert build_grammar(2, "auto") == build_grammar(2, Policy.AUTO)


def test_sentence_ends_option() -> None:
    assert accepts("Is it Paris [1]?", 2, Policy.REQUIRED)
    assert not accepts("Is it Paris [1]?", 2, Policy.REQUIRED, sentence_ends=".")
    assert not accepts("It is Paris [1]! Yes [2].", 2, Policy.REQUIRED, sentence_ends=".")
    assert accepts("It is Paris [1]. Yes [2].", 2, Policy.REQUIRED, sentence_ends=".")


TERMS = ("3.8", "0.34", "str.join", "collections.abc", "collections.abc.Sequence", "e.g")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Assignment expressions came in Python 3.8 [1].", True),
        ("The result is 0.34 [2].", True),
        ("Use str.join, e.g, to join strings [1].", True),
        ("Call (str.join) or v3.8-dev [1].", True),  # a few characters around a term
        ("See collections.abc.Sequence [1]. It is in collections.abc [1].", True),
        ("It came in Python 3.9 [1].", False),  # a decimal no source holds
        ("It came in Python 3. [1].", False),  # a "." that ends nothing but a term
        ("It came in Python 3.8.1 [1].", False),  # a term is copied whole, not extended
        ("Call os.path first [1].", False),
        ("It came in Python 3 [1].", True),  # a term's first part is still a word
    ],
)
def test_required_words_copy_dotted_terms(text: str, expected: bool) -> None:
    assert accepts(text, 2, Policy.REQUIRED, terms=TERMS) is expected


def test_dotted_terms_need_the_option_and_required() -> None:
    text = "It came in Python 3.8 [1]."
    assert not accepts(text, 2, Policy.REQUIRED)
    assert not accepts(text, 2, Policy.REQUIRED, terms=TERMS, source_terms=False)
    assert build_grammar(2, Policy.REQUIRED, terms=TERMS, source_terms=False) == build_grammar(
        2, Policy.REQUIRED
    )
    for policy in (Policy.AUTO, Policy.QUOTES_ONLY):
        assert build_grammar(2, policy, terms=TERMS) == build_grammar(2, policy)


def test_dotted_terms_found_in_order_with_their_prefixes() -> None:
    from citeformer.grammar import dotted_terms

    texts = [
        "Which version, 3.8 or 3.10?",
        "Use collections.abc.Sequence (e.g. a list). Released in 3.8. End.",
        "x" * 30 + ".yy is too long; so.is.this.one.here.and.more.parts.abcdefghijklmnopq",
    ]
    assert dotted_terms(texts) == (
        "3.8", "3.10", "collections.abc", "collections.abc.Sequence", "e.g",
        "so.is", "so.is.this", "so.is.this.one", "so.is.this.one.here",
        "so.is.this.one.here.and", "so.is.this.one.here.and.more",
    )  # the 33-character ones are longer than a word may be
    assert dotted_terms(texts, max_terms=2) == ("3.8", "3.10")
    assert dotted_terms(["No dotted term here. None at all."]) == ()


@pytest.mark.parametrize(
    ("terms", "error", "message"),
    [
        ("3.8", TypeError, "terms must be a sequence of strings, got '3.8'"),
        ([3.8], TypeError, "terms must be a sequence of strings"),
        (["3.8", 'a" | [^]'], ValueError, "term 'a\" | \\[\\^\\]' is not a dotted term"),
        (["plain"], ValueError, "term 'plain' is not a dotted term"),
        (["3."], ValueError, "term '3.' is not a dotted term"),
    ],
)
def test_bad_terms_are_named(terms: object, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        build_grammar(2, Policy.REQUIRED, terms=terms)  # type: ignore[arg-type]


# -- bounds: past them a grammar compiled for minutes in GB (benchmarks/grammar_bounds.py) -------


@pytest.mark.parametrize("name", sorted(OPTION_LIMITS))
def test_each_option_is_bounded(name: str) -> None:
    limit = OPTION_LIMITS[name]
    low = {"max_quote_chars": limit} if name == "min_quote_chars" else {}
    assert getattr(GrammarOptions(**{name: limit, **low}), name) == limit
    with pytest.raises(ValueError, match=f"{name} must be at most {limit}, got {limit + 1}"):
        GrammarOptions(**{name: limit + 1, **low})


def test_the_red_team_options_are_refused_before_compiling() -> None:
    # max_word_chars=10000 with 64 terms near that long: 640 KB of grammar, 126 s and 1.6 GB.
    long_terms = [f"{'a' * 5000}{i}.{'b' * 4990}" for i in range(64)]
    with pytest.raises(ValueError, match="max_word_chars must be at most 128, got 10000"):
        build_grammar(3, max_word_chars=10000, terms=long_terms)
    with pytest.raises(ValueError, match="is 9992 characters long, more than the 128"):
        build_grammar(3, terms=long_terms)
    # 10,000 terms: 16 s before.
    with pytest.raises(ValueError, match="terms holds 10000 terms, more than the 256"):
        build_grammar(3, terms=[f"3.{i}" for i in range(10_000)])


def test_terms_at_the_bounds_are_spelled() -> None:
    at_bounds = [f"{'a' * 60}{i:03}.{'b' * 64}" for i in range(MAX_TERMS)]
    assert all(len(term) == MAX_TERM_CHARS for term in at_bounds)
    grammar = build_grammar(3, terms=at_bounds)
    assert all(f'"{term}"' in grammar for term in at_bounds)
    assert xgr.Grammar.from_ebnf(grammar) is not None


def test_dotted_terms_keep_within_the_bounds() -> None:
    text = " ".join(f"v3.{i}" for i in range(1000)) + " " + "a" * 200 + ".b"
    assert dotted_terms([text], max_chars=10_000, max_terms=MAX_TERMS) == tuple(
        f"v3.{i}" for i in range(MAX_TERMS))
    assert dotted_terms(["x" * 200 + ".y"], max_chars=10_000) == ()  # longer than any word
    with pytest.raises(ValueError, match=f"max_terms must be at most {MAX_TERMS}, got 257"):
        dotted_terms([text], max_terms=MAX_TERMS + 1)


@pytest.mark.parametrize(("n", "group", "allowed"), [
    (1000, 3, True), (1001, 3, False), (300, 10, True), (301, 10, False), (3000, 1, True),
    (3001, 1, False), (2, 10, True),  # a group is at most n markers long
])
def test_sources_times_group_is_bounded(n: int, group: int, allowed: bool) -> None:
    slots = n * min(group, n)
    assert (slots <= MAX_MARKER_SLOTS) is allowed
    for build in (lambda: build_grammar(n, max_group=group),
                  lambda: marker_grammar(n, group),
                  lambda: build_request("q", ["s"] * n, max_group=group)):
        if allowed:
            build()
        else:
            with pytest.raises(ValueError, match=(
                f"{n} sources with max_group={group} make a grammar too costly to compile "
                rf"\(n_sources \* max_group is {slots}, at most {MAX_MARKER_SLOTS}\); pass at "
                f"most {MAX_MARKER_SLOTS // group} sources")):
                build()


def test_an_unconstrained_request_takes_any_number_of_sources() -> None:
    assert build_request("q", ["s"] * 5000, constrained=False).n_sources == 5000
