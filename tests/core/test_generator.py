"""CiteGenerator on a tiny random model and an in-memory tokenizer: fast, offline, no download.

The real embedded model is exercised in test_default_model.py and the tokenizer-family tests.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
import torch

from citeformer import (
    CiteformerError,
    CiteGenerator,
    InvalidInputError,
    PromptTooLongError,
    TokenizerMismatchError,
    build_grammar,
    build_request,
    scan_markers,
)
from tests.adversary import bracket_hungry_llama
from tests.tiny import tiny_tokenizer

SOURCES = ["Paris is the capital of France.", "Berlin is the capital of Germany."]
QUESTION = "What is the capital of France?"


@pytest.fixture(scope="module")
def gen() -> CiteGenerator:
    tokenizer = tiny_tokenizer()
    return CiteGenerator(bracket_hungry_llama(tokenizer), tokenizer)


@pytest.fixture(autouse=True)
def one_thread() -> Any:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("policy", ["required", "auto", "quotes_only"])
def test_sampled_markers_stay_in_range(gen: CiteGenerator, policy: str) -> None:
    for seed in range(3):
        answer = gen.generate(
            QUESTION, SOURCES, policy, do_sample=True, seed=seed, max_new_tokens=40
        )
        scan = scan_markers(answer.text, len(SOURCES))
        assert answer.citations, answer.text
        assert (scan.fabricated, scan.stray) == (0, ()), answer.text


def test_generate_is_answer_of_the_built_request(gen: CiteGenerator) -> None:
    options: dict[str, Any] = {"max_new_tokens": 24, "evidence": None}
    direct = gen.generate(QUESTION, SOURCES, "auto", **options)
    request = build_request(QUESTION, SOURCES, "auto", **options)
    assert gen.answer(request) == direct


def test_stream_chunks_join_to_the_answer(gen: CiteGenerator) -> None:
    stream = gen.stream(QUESTION, SOURCES, do_sample=True, seed=4, max_new_tokens=30)
    chunks = list(stream)
    assert "".join(chunks) == stream.answer.text
    assert all("[" not in c or "]" in c for c in chunks)
    with pytest.raises(RuntimeError, match="only once"):
        list(stream)


def test_a_stream_left_early_frees_the_generator(gen: CiteGenerator) -> None:
    stream = iter(gen.stream(QUESTION, SOURCES, do_sample=True, seed=2, max_new_tokens=60))
    next(stream)
    stream.close()  # type: ignore[attr-defined]
    assert gen.generate(QUESTION, SOURCES, max_new_tokens=4).generated_tokens == 4


def test_the_same_seed_gives_the_same_answer(gen: CiteGenerator) -> None:
    first = gen.generate(QUESTION, SOURCES, do_sample=True, seed=7, max_new_tokens=20)
    again = gen.generate(QUESTION, SOURCES, do_sample=True, seed=7, max_new_tokens=20)
    assert first.text == again.text


def test_arguments_are_checked_before_anything_runs(gen: CiteGenerator) -> None:
    for call in (gen.generate, gen.stream):
        with pytest.raises(InvalidInputError, match="temperature must be a finite number"):
            call(QUESTION, SOURCES, do_sample=True, temperature=float("inf"))
        with pytest.raises(TypeError, match="seed must be an int"):
            call(QUESTION, SOURCES, seed="x")  # type: ignore[arg-type]
        with pytest.raises(CiteformerError, match="prompt is empty"):
            call(QUESTION, SOURCES, prompt="")


@pytest.mark.parametrize("options", [
    {"temperature": 1e308}, {"temperature": 10**400}, {"temperature": float("nan")},
    {"max_new_tokens": 10**400}, {"max_group": 10**400}, {"max_sentence_words": 1e308},
], ids=["temperature=1e308", "temperature=10**400", "temperature=nan", "max_new_tokens=10**400",
        "max_group=10**400", "max_sentence_words=1e308"])
def test_numbers_out_of_range_are_refused_before_anything_runs(
    gen: CiteGenerator, options: dict[str, Any]
) -> None:
    (name,) = options
    for call in (gen.generate, gen.stream):
        with pytest.raises(InvalidInputError, match=f"{name} must be") as raised:
            call(QUESTION, SOURCES, do_sample=True, **options)
        assert isinstance(raised.value, ValueError) and len(str(raised.value)) < 300


def test_compiled_grammars_are_cached_and_bounded(gen: CiteGenerator) -> None:
    from citeformer.decoding.engine import TransformersEngine

    engine = TransformersEngine(gen.model, gen.tokenizer, grammar_cache_size=3)
    first = engine.compile(build_grammar(2, "auto"))
    assert engine.compile(build_grammar(2, "AUTO")) is first
    for n in range(3, 7):
        engine.compile(build_grammar(n, "auto"))
    assert engine.compile.cache_info().currsize == 3
    assert engine.compile(build_grammar(2, "auto")) is not first
    assert gen.compiled_grammar(2, "AUTO") is gen.compiled_grammar(2, "auto")


def test_compiled_grammars_are_keyed_by_their_dotted_terms(gen: CiteGenerator) -> None:
    plain = gen.compiled_grammar(2, "required")
    spelled = gen.compiled_grammar(2, "required", terms=("3.8", "str.join"))
    assert spelled is not plain
    assert gen.compiled_grammar(2, "required", terms=["3.8", "str.join"]) is spelled
    with pytest.raises(InvalidInputError, match="term '3 8' is not a dotted term"):
        gen.compiled_grammar(2, "required", terms=("3 8",))


def test_prompt_too_long_says_what_to_shorten(gen: CiteGenerator) -> None:
    limit = gen.context_length
    assert limit is not None
    with pytest.raises(PromptTooLongError, match="pass fewer or shorter sources"):
        gen.generate(QUESTION, ["Paris " * limit], max_new_tokens=8)
    with pytest.raises(PromptTooLongError, match="shorten the question"):
        gen.generate("Paris " * limit, SOURCES, max_new_tokens=8)
    # A long history is named (the advice once spoke of the sources alone).
    long_history = [("user", "Paris " * (limit // 2)), ("assistant", "Yes [1].")]
    with pytest.raises(PromptTooLongError, match=r"fewer earlier turns \(history holds 2\)"):
        gen.generate(QUESTION, SOURCES, max_new_tokens=8, history=long_history)


def test_a_tokenizer_wider_than_the_logits_is_refused() -> None:
    tokenizer = tiny_tokenizer()
    model = bracket_hungry_llama(tokenizer)
    model.config.vocab_size = len(tokenizer) - 1
    with pytest.raises(TokenizerMismatchError, match="cannot be aligned"):
        CiteGenerator(model, tokenizer)


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A tiny random Llama saved as an HF folder, in float32."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = tiny_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=2, eos_token_id=tokenizer.eos_token_id,
    )
    folder = tmp_path_factory.mktemp("tiny-llama")
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", torch.float16])
def test_from_pretrained_loads_the_dtype_asked_for(saved_model: str, dtype: object) -> None:
    gen = CiteGenerator.from_pretrained(saved_model, dtype=dtype, device="cpu")
    expected = {"float32": torch.float32, "bfloat16": torch.bfloat16}.get(dtype, dtype)  # type: ignore[call-overload]
    assert gen.model.dtype is expected and gen.model.device.type == "cpu"
    answer = gen.generate(QUESTION, SOURCES, max_new_tokens=8)
    assert not scan_markers(answer.text, len(SOURCES)).fabricated


def test_from_pretrained_auto_follows_the_cpu(
    saved_model: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from citeformer.decoding import precision

    monkeypatch.delenv(precision.DTYPE_ENV, raising=False)
    for native, expected in ((True, torch.bfloat16), (False, torch.float32)):
        monkeypatch.setattr(precision, "cpu_computes_bfloat16", lambda native=native: native)
        assert CiteGenerator.from_pretrained(saved_model, device="cpu").model.dtype is expected


def test_from_pretrained_refuses_bad_placement(saved_model: str) -> None:
    with pytest.raises(InvalidInputError, match="pass device .* or device_map .*, not both"):
        CiteGenerator.from_pretrained(saved_model, device="cpu", device_map="auto")
    with pytest.raises(InvalidInputError, match="dtype 'float64' is not one citeformer loads"):
        CiteGenerator.from_pretrained(saved_model, dtype="float64")


def test_a_batch_call_holds_the_grammars_of_one_batch_at_a_time(
    gen: CiteGenerator, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Once every row's grammar was compiled before the first batch ran and held to the end:
    # 200 rows with their own dotted terms held 200 grammars.
    import gc
    import weakref

    engine = gen.engine
    compiled: list[weakref.ref[Any]] = []
    alive_at_each_batch: list[int] = []
    real_compile, real_run = engine.kit.compile, engine.run

    @functools.lru_cache(maxsize=2)  # an engine's cache, of two grammars
    def compile_(text: str) -> Any:
        grammar = real_compile.__wrapped__(text)  # compiled afresh, not from the real cache
        compiled.append(weakref.ref(grammar))
        return grammar

    def run(rows: Any, **kwargs: Any) -> Any:
        gc.collect()
        alive_at_each_batch.append(sum(ref() is not None for ref in compiled))
        return real_run(rows, **kwargs)

    monkeypatch.setattr(engine.kit, "compile", compile_)
    monkeypatch.setattr(engine, "run", run)
    rows = 12
    questions = [f"What changed in version 3.{row}?" for row in range(rows)]  # a term per row
    answers = gen.generate_batch(
        questions, [SOURCES] * rows, batch_size=2, max_new_tokens=4, refusal=None
    )
    assert len(answers) == rows and len(compiled) == rows  # each row its own grammar
    # Before each batch, only what the cache keeps; nothing compiled ahead of its batch.
    assert alive_at_each_batch[0] == 0 and max(alive_at_each_batch) <= 2, alive_at_each_batch
    gc.collect()
    assert sum(ref() is not None for ref in compiled) <= 2
