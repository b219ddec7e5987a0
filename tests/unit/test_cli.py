"""Unit tests for the command line, with a fake generator and a toy embedder (no model loaded)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from citeformer import cli
from citeformer.citations import parse_citations
from citeformer.errors import ModelLoadError
from citeformer.quotes import find_quotes
from citeformer.types import CitedAnswer, Policy, Source

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "docs"


class FakeStream:
    def __init__(self, answer: CitedAnswer) -> None:
        self.answer = answer

    def __iter__(self):
        text = self.answer.text
        yield from (text[i:i + 5] for i in range(0, len(text), 5))


class FakeGenerator:
    """Answers with a fixed text; records the calls."""

    def __init__(self, text: str = "Paris is in France [1]. It is old [2].") -> None:
        self.text = text
        self.calls: list[dict] = []

    def _answer(self, question, sources, policy, max_new_tokens) -> CitedAnswer:
        self.calls.append({
            "question": question, "sources": list(sources), "policy": policy,
            "max_new_tokens": max_new_tokens,
        })
        quotes = find_quotes(self.text, sources) if policy == "quotes_only" else ()
        return CitedAnswer(
            self.text, tuple(parse_citations(self.text, len(sources))), tuple(sources), "stop",
            quotes=quotes,
        )

    def generate(self, question: str, sources: Sequence[Source], policy: str, *,
                 max_new_tokens: int) -> CitedAnswer:
        return self._answer(question, sources, policy, max_new_tokens)

    def stream(self, question: str, sources: Sequence[Source], policy: str, *,
               max_new_tokens: int) -> FakeStream:
        return FakeStream(self._answer(question, sources, policy, max_new_tokens))


def toy_embed(texts):
    return [[t.lower().count(c) for c in "abcdefghijklmnopqrstuvwxyz"] for t in texts]


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeGenerator:
    generator = FakeGenerator()
    loads: list[tuple] = []

    def load(model, *, progress):
        loads.append((model, progress))
        return generator

    monkeypatch.setattr(cli, "load_generator", load)
    monkeypatch.setattr(cli, "embed_texts", toy_embed)
    generator.loads = loads  # type: ignore[attr-defined]
    return generator


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "paris.md").write_text(
        "# Paris\n\nParis is the capital of France.\n\nIt was founded long ago.\n",
        encoding="utf-8",
    )
    (folder / "berlin.txt").write_text("Berlin is the capital of Germany.", encoding="utf-8")
    return folder


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# --------------------------------------------------------------------------------------- success


def test_ask_prints_answer_and_cited_references(fake, docs, capsys) -> None:
    code, out, err = run(capsys, "ask", "What is the capital of France?", "--docs", str(docs),
                         "--chunk-chars", "40")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == fake.text
    assert lines[1:3] == ["", "References:"]
    sources = fake.calls[0]["sources"]
    assert lines[3:] == [
        f"[{i}] {s.metadata['path']}, " + (
            f"line {s.metadata['line_start']}" if s.metadata["line_start"] == s.metadata["line_end"]
            else f"lines {s.metadata['line_start']}-{s.metadata['line_end']}"
        )
        for i, s in enumerate(sources[:2], start=1)
    ]
    assert "embedding" in err and "loading model" in err  # progress on stderr
    assert fake.calls[0]["policy"] == "required"
    assert fake.calls[0]["max_new_tokens"] == 160
    assert len(sources) == 3  # default --top-k
    assert fake.loads == [(None, True)]


def test_quotes_are_listed_with_their_file_and_line(fake, tmp_path, capsys) -> None:
    text = "# Paris\n\nParis is the capital\nof France.\n\nIt was founded long ago.\n"
    (tmp_path / "paris.md").write_text(text, encoding="utf-8")
    fake.text = 'It is "the capital of France" [1].'
    code, out, _ = run(capsys, "ask", "Capital?", "--docs", str(tmp_path), "--policy",
                       "quotes_only", "--top-k", "1")
    assert code == 0
    path = str(tmp_path / "paris.md")
    assert out.splitlines()[-2:] == [
        "Quotes (verbatim):", f'"the capital of France" [1] {path}, line 3'
    ]
    code, out, _ = run(capsys, "ask", "Capital?", "--docs", str(tmp_path), "--policy",
                       "quotes_only", "--top-k", "1", "--json")
    (quote,) = json.loads(out)["quotes"]
    assert text[quote["file_start"]:quote["file_end"]] == "the capital\nof France"
    assert (quote["line"], quote["source_id"], quote["path"]) == (3, 1, path)


def test_sources_carry_title_and_location_metadata(fake, docs, capsys) -> None:
    run(capsys, "ask", "capital of France", "--docs", str(docs / "paris.md"), "-k", "1")
    (source,) = fake.calls[0]["sources"]
    text = (docs / "paris.md").read_text(encoding="utf-8")
    meta = source.metadata
    assert source.title == "paris.md"
    assert meta["path"] == str(docs / "paris.md")
    assert text[meta["start"]:meta["end"]] == source.text
    assert meta["line_start"] == 1 and meta["line_end"] >= meta["line_start"]


def test_only_cited_sources_are_listed_unless_all_sources(fake, docs, capsys) -> None:
    fake.text = "It is [2]."
    _, out, _ = run(capsys, "ask", "q", "--docs", str(docs), "--chunk-chars", "40")
    refs = out.split("References:\n")[1].splitlines()
    assert len(refs) == 1 and refs[0].startswith("[2] ")
    _, out, _ = run(capsys, "ask", "q", "--docs", str(docs), "--chunk-chars", "40",
                    "--all-sources")
    refs = out.split("References:\n")[1].splitlines()
    assert [r[:3] for r in refs] == ["[1]", "[2]", "[3]"]
    assert refs[0].endswith("(not cited)") and not refs[1].endswith("(not cited)")


def test_no_citation_says_so(fake, docs, capsys) -> None:
    fake.text = "I do not know."
    code, out, _ = run(capsys, "ask", "q", "--docs", str(docs), "--policy", "auto")
    assert code == 0
    assert "(none cited;" in out
    assert fake.calls[0]["policy"] == "auto"


def test_json_output_is_pure_json_with_the_documented_shape(fake, docs, capsys) -> None:
    code, out, err = run(capsys, "ask", "capital?", "--docs", str(docs), "--json",
                         "--top-k", "2", "--max-new-tokens", "7", "--policy", "QUOTES-ONLY")
    assert code == 0
    data = json.loads(out)
    assert data["text"] == fake.text
    assert data["citations"] == [
        {"source_id": 1, "start": 19, "end": 22}, {"source_id": 2, "start": 34, "end": 37},
    ]
    assert [s["id"] for s in data["sources"]] == [1, 2]
    for source in data["sources"]:
        assert {"id", "path", "text", "title", "start", "end", "line_start", "line_end",
                "score", "cited"} <= source.keys()
    assert data["finish_reason"] == "stop"
    assert fake.calls[0]["max_new_tokens"] == 7
    assert fake.calls[0]["policy"] == Policy.QUOTES_ONLY.value
    assert err  # progress went to stderr, not stdout


def test_stream_prints_the_answer_then_references(fake, docs, capsys) -> None:
    code, out, _ = run(capsys, "ask", "q", "--docs", str(docs), "--stream", "-q")
    assert code == 0
    assert out.startswith(fake.text + "\n\nReferences:\n[1] ")


def test_quiet_silences_progress(fake, docs, capsys) -> None:
    code, _, err = run(capsys, "ask", "q", "--docs", str(docs), "--quiet")
    assert code == 0 and err == ""
    assert fake.loads == [(None, False)]


def test_model_option_is_passed_through(fake, docs, capsys) -> None:
    run(capsys, "ask", "q", "--docs", str(docs), "--model", "some/model")
    assert fake.loads == [("some/model", True)]


def test_a_skipped_binary_file_is_a_warning(fake, docs, capsys) -> None:
    (docs / "image.md").write_bytes(b"\x89PNG\x00\x00")
    code, _, err = run(capsys, "ask", "q", "--docs", str(docs))
    assert code == 0
    assert "citeformer: warning: skipping" in err and "image.md" in err


def test_the_example_documents_are_usable(fake, capsys) -> None:
    code, _, _ = run(capsys, "ask", "When was the Eiffel Tower completed?", "--docs",
                     str(EXAMPLES), "-q")
    assert code == 0
    assert all(s.metadata["path"].startswith(str(EXAMPLES)) for s in fake.calls[0]["sources"])


# ---------------------------------------------------------------------------------------- errors


def assert_clean_error(code: int, err: str, expected_code: int, *fragments: str) -> None:
    assert code == expected_code
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in err


@pytest.mark.parametrize("question", ["", "   \n"])
def test_empty_question(fake, docs, capsys, question) -> None:
    code, out, err = run(capsys, "ask", question, "--docs", str(docs))
    assert_clean_error(code, err, 2, "citeformer: error: the question is empty")
    assert out == "" and fake.loads == []


def test_missing_path(fake, tmp_path, capsys) -> None:
    code, _, err = run(capsys, "ask", "q", "--docs", str(tmp_path / "nope"))
    assert_clean_error(code, err, 2, "citeformer: error:", "does not exist")
    assert fake.loads == []  # failed before loading the model


def test_empty_folder(fake, tmp_path, capsys) -> None:
    code, _, err = run(capsys, "ask", "q", "--docs", str(tmp_path))
    assert_clean_error(code, err, 2, "has no .txt or .md files")


def test_binary_file(fake, tmp_path, capsys) -> None:
    (tmp_path / "x.txt").write_bytes(b"\x00\x01\x02")
    code, _, err = run(capsys, "ask", "q", "--docs", str(tmp_path / "x.txt"))
    assert_clean_error(code, err, 2, "is a binary file")


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["ask"],
        ["ask", "q"],  # --docs is required
        ["ask", "q", "--docs"],
        ["ask", "q", "--docs", "d", "--top-k", "0"],
        ["ask", "q", "--docs", "d", "--max-new-tokens", "many"],
        ["ask", "q", "--docs", "d", "--policy", "sometimes"],
        ["ask", "q", "--docs", "d", "--json", "--stream"],
        ["frobnicate"],
    ],
)
def test_usage_errors_exit_2(fake, capsys, argv) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert "usage:" in err and "Traceback" not in err
    assert fake.loads == []


def test_help_and_version_exit_0(capsys) -> None:
    code, out, _ = run(capsys, "ask", "--help")
    assert code == 0
    for option in ("--docs", "--json", "--policy", "--model", "--max-new-tokens", "--top-k",
                   "--stream"):
        assert option in out
    code, out, _ = run(capsys, "--version")
    assert code == 0 and out.startswith("citeformer ")


def test_missing_local_model_path(monkeypatch, docs, capsys, tmp_path) -> None:
    monkeypatch.setattr(cli, "embed_texts", toy_embed)
    code, _, err = run(capsys, "ask", "q", "--docs", str(docs), "--model",
                       str(tmp_path / "no-such-model"))
    assert_clean_error(code, err, 2, "citeformer: error: model folder", "does not exist")


def test_a_model_that_fails_to_load_is_a_clean_error(monkeypatch, docs, capsys, tmp_path) -> None:
    from citeformer.generator import CiteGenerator

    def broken(name):
        raise OSError(f"{name} does not appear to have a file named config.json\nmore detail")

    monkeypatch.setattr(CiteGenerator, "from_pretrained", staticmethod(broken))
    (tmp_path / "empty-model").mkdir()
    code, _, err = run(capsys, "ask", "q", "--docs", str(docs), "--model",
                       str(tmp_path / "empty-model"))
    assert_clean_error(code, err, 1, "could not load model", "config.json")
    assert "more detail" not in err


def test_model_errors_are_model_load_errors(monkeypatch) -> None:
    from citeformer.generator import CiteGenerator

    monkeypatch.setattr(CiteGenerator, "from_pretrained",
                        staticmethod(lambda name: (_ for _ in ()).throw(ValueError("bad"))))
    with pytest.raises(ModelLoadError, match="bad"):
        cli.load_generator("owner/name", progress=False)


def test_unexpected_errors_exit_1_without_traceback(fake, docs, capsys, monkeypatch) -> None:
    def boom(*args, **kwargs):
        raise RuntimeError("kaput")

    monkeypatch.setattr(fake, "generate", boom)
    code, _, err = run(capsys, "ask", "q", "--docs", str(docs))
    assert_clean_error(code, err, 1, "citeformer: error: unexpected RuntimeError: kaput")


def test_debug_env_prints_the_traceback(fake, docs, capsys, monkeypatch) -> None:
    monkeypatch.setenv("CITEFORMER_DEBUG", "1")
    monkeypatch.setattr(fake, "generate", lambda *a, **k: 1 / 0)
    code, _, err = run(capsys, "ask", "q", "--docs", str(docs))
    assert code == 1 and "Traceback" in err


def test_input_errors_from_the_generator_exit_2(fake, docs, capsys, monkeypatch) -> None:
    from citeformer.errors import PromptTooLongError

    def too_long(*args, **kwargs):
        raise PromptTooLongError("the prompt is too long")

    monkeypatch.setattr(fake, "generate", too_long)
    code, _, err = run(capsys, "ask", "q", "--docs", str(docs))
    assert_clean_error(code, err, 2, "citeformer: error: the prompt is too long")


def test_keyboard_interrupt_exits_130(fake, docs, capsys, monkeypatch) -> None:
    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(fake, "generate", interrupt)
    code, _, err = run(capsys, "ask", "q", "--docs", str(docs))
    assert code == 130 and "interrupted" in err


@pytest.mark.parametrize(
    ("name", "is_path"),
    [("HuggingFaceTB/SmolLM2-360M-Instruct", False), ("gpt2", False), ("./model", True),
     ("/abs/model", True), ("~/model", True), ("a/b/c", True)],
)
def test_looks_like_path(name: str, is_path: bool) -> None:
    assert cli._looks_like_path(name) is is_path


def test_python_dash_m_entry_point(monkeypatch) -> None:
    import runpy

    monkeypatch.setattr("sys.argv", ["citeformer"])
    with pytest.raises(SystemExit) as exit_:
        runpy.run_module("citeformer", run_name="__main__", alter_sys=False)
    assert exit_.value.code == 2  # no sub-command: help on stderr, usage error


# -- --server: a scripted OpenAI-compatible server -------------------------------------------


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch):
    """``--server`` answers from a FakeServer; records the URL, model and engine asked for."""
    from tests.fake_server import FakeServer

    server = FakeServer(pieces=["Paris is the capital of France [", "1", "]."])
    server.connects = []  # type: ignore[attr-defined]

    def connect(url, model, engine):
        server.connects.append((url, model, engine))  # type: ignore[attr-defined]
        generator = server.generator(model=model, engine=engine)
        generator.check()
        return generator

    monkeypatch.setattr(cli, "connect_server", connect)
    monkeypatch.setattr(cli, "embed_texts", toy_embed)
    monkeypatch.setattr(cli, "load_generator", lambda *a, **k: pytest.fail("no local model"))
    return server


def test_server_answers_with_the_grammar_sent(served, docs, capsys) -> None:
    code, out, err = run(capsys, "ask", "What is the capital of France?", "--docs", str(docs),
                         "--server", "http://gpu-box:8000", "--engine", "vllm",
                         "--max-new-tokens", "20", "--json")
    assert code == 0, err
    assert served.connects == [("http://gpu-box:8000", None, "vllm")]
    answer = json.loads(out)
    assert answer["text"] == "Paris is the capital of France [1]."
    assert answer["citations"] == [{"source_id": 1, "start": 31, "end": 34}]
    body = served.bodies[0]
    assert body["model"] == "smollm2-test" and body["max_tokens"] == 20
    assert body["structured_outputs"]["grammar"].startswith("root ::=")
    assert "the server answers with model smollm2-test" in err


def test_server_stream_and_model_name(served, docs, capsys) -> None:
    code, out, err = run(capsys, "ask", "capital of France?", "--docs", str(docs), "--stream",
                         "--server", "http://localhost:8080", "--server-model", "qwen")
    assert code == 0, err
    assert served.connects == [("http://localhost:8080", "qwen", "llama.cpp")]
    assert out.startswith("Paris is the capital of France [1].\n\nReferences:\n[1] ")
    assert served.bodies[0]["model"] == "qwen" and "grammar" in served.bodies[0]


def test_server_ignoring_the_grammar_exits_1(served, docs, capsys) -> None:
    served.pieces = ["Paris [7]."]
    code, out, err = run(capsys, "ask", "q?", "--docs", str(docs), "--server", "http://h:1")
    assert code == 1 and out == ""
    assert "error: the server at http://llm.test:8080/v1 returned marker '[7]'" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("localhost:8080", "is not an http(s) URL"),
        ("http://127.0.0.1:9", "could not reach the server at http://127.0.0.1:9/v1"),
    ],
)
def test_bad_or_unreachable_server_exits_2(docs, capsys, monkeypatch, url, message) -> None:
    monkeypatch.setattr(cli, "embed_texts", lambda texts: pytest.fail("checked before embedding"))
    code, out, err = run(capsys, "ask", "q?", "--docs", str(docs), "--server", url)
    assert code == 2 and out == ""
    assert "citeformer: error: " in err and message in err
    assert "Traceback" not in err


def test_wrong_path_on_a_server_exits_2(docs, capsys, monkeypatch) -> None:
    import httpx

    from citeformer import remote

    real = remote.ServerGenerator

    def not_found(*args, **kwargs):
        transport = httpx.MockTransport(lambda r: httpx.Response(404, text="Not Found"))
        return real(*args, transport=transport, **kwargs)

    monkeypatch.setattr(remote, "ServerGenerator", not_found)
    code, _, err = run(capsys, "ask", "q?", "--docs", str(docs), "--server", "http://h/api")
    assert code == 2 and "404" in err and "Check the URL" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["--server", "http://h", "--model", "x"],
        ["--server-model", "qwen"],
        ["--engine", "vllm"],
        ["--server", "http://h", "--engine", "tgi"],
    ],
)
def test_server_option_misuse_exits_2(docs, capsys, argv) -> None:
    code, _, err = run(capsys, "ask", "q?", "--docs", str(docs), *argv)
    assert code == 2 and "usage:" in err
