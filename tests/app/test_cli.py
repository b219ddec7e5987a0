"""Unit tests for citeformer.app.cli: ``main`` with a scripted generator and a toy embedder
injected as services (no model loaded)."""

from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path

import httpx
import pytest

from citeformer import AnswerGenerator, GenerationRequest, ModelLoadError, Policy
from citeformer.app import InputError, Services, main, services
from citeformer.app.services import connect_server, load_model, looks_like_path
from citeformer.testing import FakeGenerator
from tests.app.conftest import EXAMPLES, toy_embed
from tests.app.pdfs import drawing_pdf, encrypted, needs_pypdf, text_pdf

ANSWER = "Paris is in France [1]. It is old [2]."


class Harness:
    """The services of one test: a scripted generator, and a record of the models loaded."""

    def __init__(self) -> None:
        self.generator = self.script(ANSWER)
        self.loads: list[tuple[str | None, bool]] = []
        self.placements: list[tuple[str, str | None]] = []
        """The ``(dtype, device)`` of each model loaded."""

    @staticmethod
    def script(text: object) -> FakeGenerator:
        # Eight characters a piece: several stream chunks, and within --max-new-tokens 7.
        return FakeGenerator(text, piece_chars=8)  # type: ignore[arg-type]

    def say(self, text: str) -> None:
        self.generator = self.script(text)

    def fail_with(self, error: BaseException) -> None:
        def script(request: GenerationRequest) -> str:
            raise error

        self.generator = self.script(script)

    @property
    def request(self) -> GenerationRequest:
        (request,) = self.generator.requests
        return request

    def load(
        self, model: str | None, *, progress: bool, dtype: str, device: str | None
    ) -> AnswerGenerator:
        self.loads.append((model, progress))
        self.placements.append((dtype, device))
        return self.generator

    @property
    def services(self) -> Services:
        def no_server(url: str, model: str | None, engine: str) -> AnswerGenerator:
            raise AssertionError("no server was asked for")

        return Services(load_model=self.load, connect_server=no_server, embed=toy_embed)


@pytest.fixture
def fake() -> Harness:
    return Harness()


def run(
    capsys: pytest.CaptureFixture[str], *argv: str, services: Services | Harness | None = None
) -> tuple[int, str, str]:
    if isinstance(services, Harness):
        services = services.services
    code = main(list(argv), services=services)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# --------------------------------------------------------------------------------------- success


def test_ask_prints_answer_and_cited_references(fake, docs, capsys) -> None:
    code, out, err = run(capsys, "ask", "What is the capital of France?", "--docs", str(docs),
                         "--chunk-chars", "40", services=fake)
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == ANSWER
    assert lines[1:3] == ["", "References:"]
    sources = fake.request.sources
    assert [line for line in lines[3:] if not line.startswith("    ")] == [
        f"[{i}] {s.metadata['path']}, " + (
            f"line {s.metadata['line_start']}" if s.metadata["line_start"] == s.metadata["line_end"]
            else f"lines {s.metadata['line_start']}-{s.metadata['line_end']}"
        )
        for i, s in enumerate(sources[:2], start=1)
    ]
    # Under each reference, the sentence its citation found support in, with its line (the
    # file is on the reference line).
    assert lines[4] == '    line 3: "Paris is the capital of France."'
    assert "embedding" in err and "loading model" in err  # progress on stderr
    assert fake.request.policy == "required"
    assert fake.request.max_new_tokens == 160
    assert fake.request.question == "What is the capital of France?"
    assert len(sources) == 3  # default --top-k
    assert fake.loads == [(None, True)]


def test_quotes_are_listed_with_their_file_and_line(fake, tmp_path, capsys) -> None:
    text = "# Paris\n\nParis is the capital\nof France.\n\nIt was founded long ago.\n"
    (tmp_path / "paris.md").write_text(text, encoding="utf-8")
    fake.say('It is "the capital of France" [1].')
    code, out, _ = run(capsys, "ask", "Capital?", "--docs", str(tmp_path), "--policy",
                       "quotes_only", "--top-k", "1", services=fake)
    assert code == 0
    path = str(tmp_path / "paris.md")
    assert out.splitlines()[-2:] == [
        "Quotes (verbatim):", f'"the capital of France" [1] {path}, line 3'
    ]
    code, out, _ = run(capsys, "ask", "Capital?", "--docs", str(tmp_path), "--policy",
                       "quotes_only", "--top-k", "1", "--json", services=fake)
    (quote,) = json.loads(out)["quotes"]
    assert text[quote["file_start"]:quote["file_end"]] == "the capital\nof France"
    assert (quote["line"], quote["source_id"], quote["path"]) == (3, 1, path)


def test_sources_carry_title_and_location_metadata(fake, docs, capsys) -> None:
    run(capsys, "ask", "capital of France", "--docs", str(docs / "paris.md"), "-k", "1",
        services=fake)
    (source,) = fake.request.sources
    text = (docs / "paris.md").read_text(encoding="utf-8")
    meta = source.metadata
    assert source.title == "paris.md"
    assert meta["path"] == str(docs / "paris.md")
    assert text[meta["start"]:meta["end"]] == source.text
    assert meta["line_start"] == 1 and meta["line_end"] >= meta["line_start"]


def test_only_cited_sources_are_listed_unless_all_sources(fake, docs, capsys) -> None:
    fake.say("It is [2].")
    _, out, _ = run(capsys, "ask", "q", "--docs", str(docs), "--chunk-chars", "40",
                    services=fake)
    refs = [r for r in out.split("References:\n")[1].splitlines() if r.startswith("[")]
    assert len(refs) == 1 and refs[0].startswith("[2] ")
    _, out, _ = run(capsys, "ask", "q", "--docs", str(docs), "--chunk-chars", "40",
                    "--all-sources", services=fake)
    refs = [r for r in out.split("References:\n")[1].splitlines() if r.startswith("[")]
    assert [r[:3] for r in refs] == ["[1]", "[2]", "[3]"]
    assert refs[0].endswith("(not cited)") and not refs[1].endswith("(not cited)")


def test_no_citation_says_so(fake, docs, capsys) -> None:
    fake.say("I do not know.")
    code, out, _ = run(capsys, "ask", "q", "--docs", str(docs), "--policy", "auto",
                       services=fake)
    assert code == 0
    assert "(none cited;" in out
    assert fake.request.policy is Policy.AUTO


def test_json_output_is_pure_json_with_the_documented_shape(fake, docs, capsys) -> None:
    code, out, err = run(capsys, "ask", "capital?", "--docs", str(docs), "--json",
                         "--top-k", "2", "--max-new-tokens", "7", "--policy", "QUOTES-ONLY",
                         services=fake)
    assert code == 0
    data = json.loads(out)
    assert data["text"] == ANSWER
    assert (data["question"], data["policy"]) == ("capital?", "quotes_only")
    assert [{k: c[k] for k in ("source_id", "start", "end")} for c in data["citations"]] == [
        {"source_id": 1, "start": 19, "end": 22}, {"source_id": 2, "start": 34, "end": 37},
    ]
    for citation in data["citations"]:
        evidence = citation["evidence"]
        source = data["sources"][citation["source_id"] - 1]
        document = (docs / Path(evidence["path"]).name).read_text(encoding="utf-8")
        assert document[evidence["file_start"]:evidence["file_end"]] == evidence["text"]
        assert source["text"][evidence["source_start"]:evidence["source_end"]] == evidence["text"]
        assert evidence["line"] == document.count("\n", 0, evidence["file_start"]) + 1
        assert evidence["page"] is None and isinstance(evidence["weak"], bool)
    assert [s["id"] for s in data["sources"]] == [1, 2]
    for source in data["sources"]:
        assert {"id", "path", "text", "title", "start", "end", "line_start", "line_end",
                "page", "score", "cited"} <= source.keys()
    assert data["finish_reason"] == "stop"
    assert fake.request.max_new_tokens == 7
    assert fake.request.policy == Policy.QUOTES_ONLY.value
    assert err  # progress went to stderr, not stdout


def test_stream_prints_the_answer_then_references(fake, docs, capsys) -> None:
    code, out, _ = run(capsys, "ask", "q", "--docs", str(docs), "--stream", "-q", services=fake)
    assert code == 0
    assert out.startswith(ANSWER + "\n\nReferences:\n[1] ")
    (stream,) = fake.generator.streams
    assert stream.finished and stream.generated > 1  # printed as it came, to the end


def test_a_cut_off_answer_says_so_on_stderr(fake, docs, capsys) -> None:
    code, out, err = run(capsys, "ask", "q", "--docs", str(docs), "--max-new-tokens", "2",
                         services=fake)
    assert code == 0
    # two pieces of eight characters, and what says they are not the whole answer
    assert out.startswith("Paris is in Fran (cut at max_new_tokens)\n")
    assert "the answer was cut off at --max-new-tokens 2" in err


def test_a_cut_off_stream_ends_with_the_note(fake, docs, capsys) -> None:
    code, out, _ = run(capsys, "ask", "q", "--docs", str(docs), "--max-new-tokens", "2",
                       "--stream", services=fake)
    assert code == 0
    assert out.startswith("Paris is in Fran (cut at max_new_tokens)\n")


@pytest.mark.parametrize("output", [[], ["--stream"]])
def test_a_whole_answer_has_no_cut_note(fake, docs, capsys, output) -> None:
    code, out, _ = run(capsys, "ask", "q", "--docs", str(docs), *output, services=fake)
    assert code == 0 and "(cut at" not in out


def test_quiet_silences_progress(fake, docs, capsys) -> None:
    code, _, err = run(capsys, "ask", "q", "--docs", str(docs), "--quiet", services=fake)
    assert code == 0 and err == ""
    assert fake.loads == [(None, False)]


def test_model_option_is_passed_through(fake, docs, capsys) -> None:
    run(capsys, "ask", "q", "--docs", str(docs), "--model", "some/model", services=fake)
    assert fake.loads == [("some/model", True)]


def test_device_and_dtype_reach_the_model_loader(fake, docs, capsys) -> None:
    run(capsys, "ask", "q", "--docs", str(docs), services=fake)
    run(capsys, "ask", "q", "--docs", str(docs), "--device", "cpu", "--dtype", "bfloat16",
        services=fake)
    code, _, err = run(capsys, "ask", "q", "--docs", str(docs), "--model", "some/model",
                       "--dtype", "float32", services=fake)
    assert code == 0
    assert fake.placements == [("auto", None), ("bfloat16", "cpu"), ("float32", None)]
    assert "loading model some/model in float32" in err


def test_load_model_hands_dtype_and_device_to_the_generator(monkeypatch) -> None:
    from citeformer import CiteGenerator

    monkeypatch.setattr(services, "check_hub_model", lambda model: None)  # as if cached

    calls: list[tuple[str | None, dict]] = []
    monkeypatch.setattr(CiteGenerator, "default",
                        staticmethod(lambda **kwargs: calls.append((None, kwargs))))
    monkeypatch.setattr(CiteGenerator, "from_pretrained",
                        staticmethod(lambda name, **kwargs: calls.append((name, kwargs))))
    load_model(None, progress=False, dtype="float16", device="cpu")
    load_model("owner/name", progress=True)
    assert calls == [
        (None, {"progress": False, "dtype": "float16", "device": "cpu"}),
        ("owner/name", {"dtype": "auto", "device": None}),
    ]


def test_the_dtype_choices_are_the_ones_the_core_loads() -> None:
    from citeformer.app.ask import DTYPE_CHOICES
    from citeformer.decoding.precision import DTYPES

    assert ("auto", *DTYPES) == DTYPE_CHOICES


def test_the_engine_choices_are_the_servers_engines() -> None:
    from citeformer.app.ask import ENGINE_CHOICES
    from citeformer.server import ENGINES

    assert ENGINE_CHOICES == ENGINES


@pytest.mark.parametrize(
    ("device", "message"),
    [
        ("banana", "device 'banana' is not a torch device; pass 'cpu', 'cuda', 'cuda:1' or 'mps'"),
        pytest.param("cuda", "device 'cuda' asks for CUDA but this torch has no CUDA device",
                     marks=pytest.mark.skipif("__import__('torch').cuda.is_available()")),
    ],
)
def test_a_device_torch_cannot_use_exits_2(fake, docs, capsys, device, message) -> None:
    code, out, err = run(capsys, "ask", "q", "--docs", str(docs), "--device", device,
                         services=fake)
    assert_clean_error(code, err, 2, f"citeformer: error: {message}")
    assert out == "" and fake.loads == []


@pytest.mark.parametrize("option", [["--device", "cpu"], ["--dtype", "float32"]])
def test_device_and_dtype_do_not_apply_to_a_server(docs, capsys, option) -> None:
    code, out, err = run(capsys, "ask", "q", "--docs", str(docs), "--server", "http://h:1",
                         *option)
    assert code == 2 and out == "" and "usage:" in err
    assert err.splitlines()[-1].startswith(f"citeformer ask: error: {option[0]} sets how a model")
    assert "with --server URL the server decides that" in err


def test_a_dtype_citeformer_does_not_load_is_a_usage_error(fake, docs, capsys) -> None:
    code, _, err = run(capsys, "ask", "q", "--docs", str(docs), "--dtype", "float64",
                       services=fake)
    assert code == 2 and "argument --dtype: invalid choice: 'float64'" in err
    assert fake.loads == []


def test_a_skipped_binary_file_is_a_warning(fake, docs, capsys) -> None:
    (docs / "image.md").write_bytes(b"\x89PNG\x00\x00")
    code, _, err = run(capsys, "ask", "q", "--docs", str(docs), services=fake)
    assert code == 0
    assert "citeformer: warning: skipping" in err and "image.md" in err


def test_warnings_go_to_the_injected_sink(fake, docs, capsys) -> None:
    (docs / "image.md").write_bytes(b"\x89PNG\x00\x00")
    seen: list[str] = []
    services = dataclasses.replace(fake.services, warn=seen.append)
    code, _, err = run(capsys, "ask", "q", "--docs", str(docs), services=services)
    assert code == 0 and "warning" not in err
    (warning,) = seen
    assert "image.md" in warning and "binary" in warning


def test_the_libraries_own_warnings_are_shown_as_citeformer_warnings(fake, docs, capsys) -> None:
    import warnings

    from citeformer.default_model import ModelCacheWarning

    def load(model: str | None, *, progress: bool, **_: object) -> AnswerGenerator:
        warnings.warn("the cached model was rebuilt", ModelCacheWarning, stacklevel=1)
        warnings.warn("some other library speaking", UserWarning, stacklevel=1)
        return fake.generator

    seen: list[str] = []
    services = dataclasses.replace(fake.services, load_model=load, warn=seen.append)
    with pytest.warns(UserWarning) as others:
        code, _, _ = run(capsys, "ask", "q", "--docs", str(docs), services=services)
    assert code == 0
    assert seen == ["the cached model was rebuilt"]
    # The other library's warning went on to Python's warning machinery, untouched.
    assert [(w.category, str(w.message)) for w in others] == [
        (UserWarning, "some other library speaking")
    ]


def test_the_example_documents_are_usable(fake, capsys) -> None:
    code, _, _ = run(capsys, "ask", "When was the Eiffel Tower completed?", "--docs",
                     str(EXAMPLES), "-q", services=fake)
    assert code == 0
    assert all(s.metadata["path"].startswith(str(EXAMPLES)) for s in fake.request.sources)


# ---------------------------------------------------------------------------------------- errors


def assert_clean_error(code: int, err: str, expected_code: int, *fragments: str) -> None:
    assert code == expected_code
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in err


@pytest.mark.parametrize("question", ["", "   \n"])
def test_empty_question(fake, docs, capsys, question) -> None:
    code, out, err = run(capsys, "ask", question, "--docs", str(docs), services=fake)
    assert_clean_error(code, err, 2, "citeformer: error: the question is empty")
    assert out == "" and fake.loads == []


def test_missing_path(fake, tmp_path, capsys) -> None:
    code, _, err = run(capsys, "ask", "q", "--docs", str(tmp_path / "nope"), services=fake)
    assert_clean_error(code, err, 2, "citeformer: error:", "does not exist")
    assert fake.loads == []  # failed before loading the model


def test_a_symlink_loop_is_named_as_such(fake, tmp_path, capsys) -> None:
    loop = tmp_path / "loop.md"
    loop.symlink_to(loop)
    code, _, err = run(capsys, "ask", "q", "--docs", str(loop), services=fake)
    assert_clean_error(code, err, 2, f"citeformer: error: '{loop}' is a symlink loop")
    assert "does not exist" not in err


def test_empty_folder(fake, tmp_path, capsys) -> None:
    code, _, err = run(capsys, "ask", "q", "--docs", str(tmp_path), services=fake)
    assert_clean_error(code, err, 2, "has no documents (.txt, .md, .html, .htm, .pdf files)")


def test_binary_file(fake, tmp_path, capsys) -> None:
    (tmp_path / "x.txt").write_bytes(b"\x00\x01\x02")
    code, _, err = run(capsys, "ask", "q", "--docs", str(tmp_path / "x.txt"), services=fake)
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
    code, out, err = run(capsys, *argv, services=fake)
    assert code == 2
    assert "usage:" in err and "Traceback" not in err
    assert fake.loads == []


def test_usage_errors_show_the_usage_of_their_command(capsys) -> None:
    code, out, err = run(capsys, "ask", "q", "--docs", "d", "--top-k", "0")
    assert code == 2 and out == ""
    usage, message = err.splitlines()[0], err.splitlines()[-1]
    assert usage.startswith("usage: citeformer ask ")
    assert message == "citeformer ask: error: argument --top-k/-k: must be at least 1, got 0"


def test_help_and_version_exit_0(capsys) -> None:
    code, out, _ = run(capsys, "ask", "--help")
    assert code == 0
    for option in ("--docs", "--json", "--policy", "--model", "--max-new-tokens", "--top-k",
                   "--stream", "--device", "--dtype", "--no-index-cache"):
        assert option in out
    code, out, _ = run(capsys, "--version")
    assert code == 0 and out.startswith("citeformer ")


def test_missing_local_model_path(docs, capsys, tmp_path) -> None:
    code, _, err = run(capsys, "ask", "q", "--docs", str(docs), "--model",
                       str(tmp_path / "no-such-model"), services=Services(embed=toy_embed))
    assert_clean_error(code, err, 2, "citeformer: error: model folder", "does not exist")


def test_a_model_that_fails_to_load_is_a_clean_error(monkeypatch, docs, capsys, tmp_path) -> None:
    from citeformer import CiteGenerator

    def broken(name, **placement):
        raise OSError(f"{name} does not appear to have a file named config.json\nmore detail")

    monkeypatch.setattr(CiteGenerator, "from_pretrained", staticmethod(broken))
    (tmp_path / "empty-model").mkdir()
    code, _, err = run(capsys, "ask", "q", "--docs", str(docs), "--model",
                       str(tmp_path / "empty-model"), services=Services(embed=toy_embed))
    assert_clean_error(code, err, 1, "could not load model", "config.json")
    assert "more detail" not in err


def test_model_errors_are_model_load_errors(monkeypatch) -> None:
    from citeformer import CiteGenerator

    monkeypatch.setattr(services, "check_hub_model", lambda model: None)  # as if cached

    monkeypatch.setattr(CiteGenerator, "from_pretrained",
                        staticmethod(lambda name, **_: (_ for _ in ()).throw(ValueError("bad"))))
    with pytest.raises(ModelLoadError, match="bad"):
        load_model("owner/name", progress=False)


def test_a_missing_model_folder_is_an_input_error() -> None:
    with pytest.raises(InputError, match="model folder './no-such-model' does not exist"):
        load_model("./no-such-model", progress=False)


def test_unexpected_errors_exit_1_without_traceback(fake, docs, capsys) -> None:
    fake.fail_with(RuntimeError("kaput"))
    code, _, err = run(capsys, "ask", "q", "--docs", str(docs), services=fake)
    assert_clean_error(code, err, 1, "citeformer: error: unexpected RuntimeError: kaput")


def test_debug_env_prints_the_traceback(fake, docs, capsys, monkeypatch) -> None:
    monkeypatch.setenv("CITEFORMER_DEBUG", "1")
    fake.fail_with(ZeroDivisionError("division by zero"))
    code, _, err = run(capsys, "ask", "q", "--docs", str(docs), services=fake)
    assert code == 1 and "Traceback" in err and "ZeroDivisionError" in err


def test_input_errors_from_the_generator_exit_2(fake, docs, capsys) -> None:
    from citeformer import PromptTooLongError

    fake.fail_with(PromptTooLongError("the prompt is too long"))
    code, _, err = run(capsys, "ask", "q", "--docs", str(docs), services=fake)
    assert_clean_error(code, err, 2, "citeformer: error: the prompt is too long")


def test_a_prompt_longer_than_the_context_exits_2(fake, docs, capsys) -> None:
    fake.generator = FakeGenerator(ANSWER, context_length=50)
    code, out, err = run(capsys, "ask", "q", "--docs", str(docs), services=fake)
    assert_clean_error(code, err, 2, "citeformer: error: the prompt is", "context holds 50")
    assert out == ""


def test_keyboard_interrupt_exits_130(fake, docs, capsys) -> None:
    fake.fail_with(KeyboardInterrupt())
    code, _, err = run(capsys, "ask", "q", "--docs", str(docs), services=fake)
    assert code == 130 and "interrupted" in err


@pytest.mark.parametrize(
    ("name", "is_path"),
    [("HuggingFaceTB/SmolLM2-360M-Instruct", False), ("gpt2", False), ("./model", True),
     ("/abs/model", True), ("~/model", True), ("a/b/c", True)],
)
def test_looks_like_path(name: str, is_path: bool) -> None:
    assert looks_like_path(name) is is_path


def test_python_dash_m_entry_point() -> None:
    import subprocess
    import sys

    # A process of its own: the entry point ends the process it runs in (cli.run).
    done = subprocess.run([sys.executable, "-m", "citeformer"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2  # no sub-command: help on stderr, usage error
    assert done.stdout == "" and done.stderr.startswith("usage: citeformer")


def test_the_application_api() -> None:
    import citeformer.app

    assert sorted(citeformer.app.__all__) == [
        "AppError", "AskOptions", "InputError", "Interrupted", "Services", "UsageError", "ask",
        "ask_many", "main",
    ]


def test_the_console_script_runs_main() -> None:
    import importlib
    import re

    from citeformer.app.cli import run

    pyproject = (EXAMPLES.parents[1] / "pyproject.toml").read_text(encoding="utf-8")
    (target,) = re.findall(r'^citeformer = "(.+)"$', pyproject, flags=re.MULTILINE)
    module, _, name = target.partition(":")
    assert getattr(importlib.import_module(module), name) is run


def test_run_ends_the_process_as_an_exit_does() -> None:
    """Exit handlers run, buffered output is flushed, and the status is main's."""
    import subprocess
    import sys

    code = (
        "import atexit, sys\n"
        "from citeformer.app.cli import run\n"
        "atexit.register(lambda: print('the exit handler ran'))\n"
        "sys.argv = ['citeformer', *sys.argv[1:]]\n"
        "run()\n"
    )
    done = subprocess.run([sys.executable, "-c", code, "--version"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0
    assert done.stdout == "citeformer 0.1.0\nthe exit handler ran\n"
    failed = subprocess.run([sys.executable, "-c", code, "ask"], capture_output=True,
                            text=True, timeout=60)
    assert failed.returncode == 2 and "error: the following arguments are required" in failed.stderr
    assert failed.stdout == "the exit handler ran\n"


# -- --server: a scripted OpenAI-compatible server -------------------------------------------


class Served:
    """``--server`` answers from a FakeServer; records the URL, model and engine asked for."""

    def __init__(self) -> None:
        from citeformer.testing import FakeServer

        self.server = FakeServer(pieces=["Paris is the capital of France [", "1", "]."])
        self.connects: list[tuple[str, str | None, str]] = []

    def connect(self, url: str, model: str | None, engine: str):
        self.connects.append((url, model, engine))
        generator = self.server.generator(model=model, engine=engine)
        generator.check()
        return generator

    @property
    def services(self) -> Services:
        def no_model(model: str | None, *, progress: bool, **_: object) -> AnswerGenerator:
            raise AssertionError("no local model")

        return Services(load_model=no_model, connect_server=self.connect, embed=toy_embed)


@pytest.fixture
def served() -> Served:
    return Served()


def test_server_answers_with_the_grammar_sent(served, docs, capsys) -> None:
    code, out, err = run(capsys, "ask", "What is the capital of France?", "--docs", str(docs),
                         "--server", "http://gpu-box:8000", "--engine", "vllm",
                         "--max-new-tokens", "20", "--json", services=served.services)
    assert code == 0, err
    assert served.connects == [("http://gpu-box:8000", None, "vllm")]
    answer = json.loads(out)
    assert answer["text"] == "Paris is the capital of France [1]."
    (citation,) = answer["citations"]
    assert (citation["source_id"], citation["start"], citation["end"]) == (1, 31, 34)
    assert citation["evidence"]["text"] == "Paris is the capital of France."
    body = served.server.bodies[0]
    assert body["model"] == "smollm2-test" and body["max_tokens"] == 20
    assert body["structured_outputs"]["grammar"].startswith("root ::=")
    assert "the server answers with model smollm2-test" in err


def test_server_stream_and_model_name(served, docs, capsys) -> None:
    code, out, err = run(capsys, "ask", "capital of France?", "--docs", str(docs), "--stream",
                         "--server", "http://localhost:8080", "--server-model", "qwen",
                         services=served.services)
    assert code == 0, err
    assert served.connects == [("http://localhost:8080", "qwen", "llama.cpp")]
    assert out.startswith("Paris is the capital of France [1].\n\nReferences:\n[1] ")
    assert served.server.bodies[0]["model"] == "qwen" and "grammar" in served.server.bodies[0]


def test_server_ignoring_the_grammar_exits_1(served, docs, capsys) -> None:
    served.server.pieces = ["Paris [7]."]
    code, out, err = run(capsys, "ask", "capital of France?", "--docs", str(docs), "--server",
                         "http://h:1", services=served.services)
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
def test_bad_or_unreachable_server_exits_2(docs, capsys, url, message) -> None:
    def embed(texts):
        pytest.fail("checked before embedding")

    code, out, err = run(capsys, "ask", "q?", "--docs", str(docs), "--server", url,
                         services=Services(embed=embed))
    assert code == 2 and out == ""
    assert "citeformer: error: " in err and message in err
    assert "Traceback" not in err


def test_wrong_path_on_a_server_exits_2(docs, capsys) -> None:
    not_found = httpx.MockTransport(lambda request: httpx.Response(404, text="Not Found"))
    services = Services(
        connect_server=functools.partial(connect_server, transport=not_found), embed=toy_embed
    )
    code, _, err = run(capsys, "ask", "q?", "--docs", str(docs), "--server", "http://h/api",
                       services=services)
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


# -- PDF and HTML documents ----------------------------------------------------------------------

REPORT = [
    "Annual Report on Towers\nThis report covers tall structures in Europe.",
    "The Eiffel Tower stands in Paris.\nIt was completed on 31 March 1889.\nIt is 330 metres tall.",
    "The Berlin TV tower was finished in 1969.\nIt stands at Alexanderplatz.",
]


def cite_the_source_with(words: str, claim: str):
    """A script citing whichever retrieved source holds ``words``, as a faithful model would."""
    def script(request: GenerationRequest) -> str:
        (k,) = [i for i, s in enumerate(request.sources, start=1) if words in s.text]
        return f"{claim} [{k}]."

    return script


@needs_pypdf
def test_a_pdf_answer_names_the_page_in_references_and_json(fake, tmp_path, capsys) -> None:
    pdf = tmp_path / "report.pdf"
    pdf.write_bytes(text_pdf(REPORT))
    fake.generator = Harness.script(
        cite_the_source_with("1889", "It was completed on 31 March 1889")
    )
    argv = ["ask", "When was the Eiffel Tower completed?", "--docs", str(pdf), "--chunk-chars",
            "100", "-k", "3", "-q"]
    code, out, err = run(capsys, *argv, services=fake)
    assert code == 0, err
    k = next(i for i, s in enumerate(fake.request.sources, start=1) if "1889" in s.text)
    assert out.split("References:\n")[1].splitlines() == [
        f"[{k}] {pdf}, page 2",
        '    page 2, line 2: "It was completed on 31 March 1889."',
    ]
    code, out, _ = run(capsys, *argv, "--json", services=fake)
    data = json.loads(out)
    source = data["sources"][k - 1]
    assert (source["path"], source["page"], source["line_start"]) == (str(pdf), 2, 1)
    (citation,) = data["citations"]
    evidence = citation["evidence"]
    assert (evidence["page"], evidence["line"], evidence["path"]) == (2, 2, str(pdf))
    assert evidence["text"] == "It was completed on 31 March 1889."
    extracted = "\n\n".join(REPORT)  # offsets are into the extracted text
    assert extracted[evidence["file_start"]:evidence["file_end"]] == evidence["text"]
    assert extracted[source["start"]:source["end"]] == source["text"]


@needs_pypdf
def test_unusable_pdfs_in_a_folder_are_skipped_with_warnings(fake, tmp_path, capsys) -> None:
    (tmp_path / "report.pdf").write_bytes(text_pdf(REPORT))
    (tmp_path / "secret.pdf").write_bytes(encrypted(text_pdf(REPORT), "secret"))
    (tmp_path / "scan.pdf").write_bytes(drawing_pdf())
    fake.say("In 1889 [1].")
    code, out, err = run(capsys, "ask", "When?", "--docs", str(tmp_path), services=fake)
    assert code == 0, err
    warnings = [line for line in err.splitlines() if line.startswith("citeformer: warning:")]
    assert len(warnings) == 2
    assert "scan.pdf" in warnings[0] and "no extractable text" in warnings[0]
    assert "secret.pdf" in warnings[1] and "is encrypted and needs a password" in warnings[1]
    assert all(s.metadata["path"].endswith("report.pdf") for s in fake.request.sources)


@needs_pypdf
def test_a_corrupt_pdf_named_directly_exits_2(fake, tmp_path, capsys) -> None:
    broken = tmp_path / "broken.pdf"
    broken.write_bytes(text_pdf(REPORT)[:250])
    code, out, err = run(capsys, "ask", "When?", "--docs", str(broken), services=fake)
    assert_clean_error(code, err, 2, f"citeformer: error: '{broken}' is not a readable PDF")
    assert out == "" and fake.loads == []


def shipped_image_pdfs() -> Path:
    """matplotlib's folder of toolbar icons: real one-page PDFs of drawings only, no text."""
    matplotlib = pytest.importorskip("matplotlib")
    folder = Path(matplotlib.get_data_path()) / "images"
    if not (folder / "home.pdf").is_file():
        pytest.skip(f"this matplotlib ships no {folder / 'home.pdf'}")
    return folder


@needs_pypdf
def test_a_real_image_only_pdf_in_a_folder_is_skipped_with_a_warning(
    fake, tmp_path, capsys
) -> None:
    icon = shipped_image_pdfs() / "home.pdf"
    (tmp_path / "home.pdf").write_bytes(icon.read_bytes())
    (tmp_path / "report.pdf").write_bytes(text_pdf(REPORT))
    fake.say("In 1889 [1].")
    code, out, err = run(capsys, "ask", "When?", "--docs", str(tmp_path), services=fake)
    assert code == 0, err
    warnings = [line for line in err.splitlines() if line.startswith("citeformer: warning:")]
    assert warnings == [
        f"citeformer: warning: skipping {str(tmp_path / 'home.pdf')!r} has no extractable text "
        "(1 page(s) of images or drawings, such as a scan); run OCR on it first, e.g. with "
        "ocrmypdf"
    ]
    assert fake.request.n_sources > 0
    assert all(s.metadata["path"].endswith("report.pdf") for s in fake.request.sources)
    assert "In 1889" in out


@needs_pypdf
def test_a_real_image_only_pdf_named_directly_exits_2(fake, capsys) -> None:
    icon = shipped_image_pdfs() / "home.pdf"
    code, out, err = run(capsys, "ask", "When?", "--docs", str(icon), services=fake)
    assert_clean_error(
        code, err, 2, f"citeformer: error: {str(icon)!r} has no extractable text (1 page(s)",
        "run OCR on it first",
    )
    assert out == "" and fake.loads == []


@needs_pypdf
def test_a_folder_of_only_image_pdfs_exits_2_after_a_warning_for_each(fake, capsys) -> None:
    # matplotlib's icon folder as shipped: its PNG and SVG files are not documents, and every
    # PDF is skipped, so nothing is left to answer from.
    folder = shipped_image_pdfs()
    icons = sorted(folder.glob("*.pdf"))
    code, out, err = run(capsys, "ask", "When?", "--docs", str(folder), services=fake)
    assert_clean_error(code, err, 2, "none of the documents could be read")
    warnings = [line for line in err.splitlines() if line.startswith("citeformer: warning:")]
    assert len(warnings) == len(icons)
    for warning, icon in zip(warnings, icons, strict=True):
        assert f"skipping {str(icon)!r} has no extractable text" in warning
    assert out == "" and fake.loads == []


def test_a_pdf_without_pypdf_says_what_to_install(fake, tmp_path, capsys, monkeypatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "pypdf", None)
    (tmp_path / "report.pdf").write_bytes(text_pdf(REPORT))
    code, _, err = run(capsys, "ask", "When?", "--docs", str(tmp_path / "report.pdf"),
                       services=fake)
    assert_clean_error(code, err, 2, "reading PDF files needs pypdf",
                       "pip install 'pypdf>=5'")


def test_an_html_page_is_cited_by_its_title_and_file_line(fake, tmp_path, capsys) -> None:
    page = tmp_path / "tower.html"
    page.write_text(
        "<!doctype html>\n<html><head><title>Eiffel Tower</title>\n"
        "<script>var x = 1;</script></head>\n<body>\n<p>The tower stands in Paris.\n"
        "It was completed on 31 March 1889.</p>\n</body></html>\n",
        encoding="utf-8",
    )
    fake.say("It was completed on 31 March 1889 [1].")
    code, out, err = run(capsys, "ask", "When?", "--docs", str(page), "-q", services=fake)
    assert code == 0, err
    (source,) = fake.request.sources
    assert source.title == "Eiffel Tower" and "var x" not in source.text
    assert out.split("References:\n")[1].splitlines() == [
        f"[1] {page}, lines 5-6",
        '    line 6: "It was completed on 31 March 1889."',
    ]


@pytest.mark.parametrize("quiet", [False, True])
def test_the_library_log_is_shown_as_progress_unless_quiet(fake, docs, capsys, quiet) -> None:
    import logging

    library = logging.getLogger("citeformer.default_model")
    before = logging.getLogger("citeformer").handlers[:]

    def load(model, **placement):
        library.info("loading the model from its cache")
        library.debug("a detail")
        return fake.generator

    services = dataclasses.replace(fake.services, load_model=load)
    code, _, err = run(capsys, "ask", "q", "--docs", str(docs), *(["-q"] if quiet else []),
                       services=services)
    assert code == 0
    assert ("citeformer: loading the model from its cache\n" in err) is not quiet
    assert "a detail" not in err
    assert logging.getLogger("citeformer").handlers == before  # put back
    library.info("after the command")
    assert "after the command" not in capsys.readouterr().err


# -- grounded refusal ----------------------------------------------------------------------------


def test_a_question_the_passages_do_not_answer_is_refused_without_the_server(
    served, docs, capsys
) -> None:
    code, out, err = run(capsys, "ask", "What is the population of Peru?", "--docs", str(docs),
                         "--server", "http://h:1", services=served.services)
    assert code == 0, err
    assert out.splitlines()[0] == "The sources do not answer this question."
    assert "[1]" not in out and served.server.bodies == []
    assert ("the retrieved passages do not answer the question: support 0.00 < threshold 0.5 "
            "(lexical: the best passage, or pair of passages, holds 0 of the question's 2 words, "
            'not "peru", "population") (--no-refusal answers anyway)') in err


def test_a_refusal_in_json_is_abstained_with_no_citation(served, docs, capsys) -> None:
    code, out, _ = run(capsys, "ask", "What is the population of Peru?", "--docs", str(docs),
                       "--server", "http://h:1", "--json", services=served.services)
    answer = json.loads(out)
    assert code == 0 and answer["abstained"] is True and answer["citations"] == []
    assert answer["text"] == "The sources do not answer this question."
    refusal = answer["refusal"]
    assert (refusal["measure"], refusal["support"], refusal["threshold"]) == ("lexical", 0.0, 0.5)
    assert refusal["offer_below"] is None and '"peru"' in refusal["reason"]


def test_json_without_refusal_says_so_and_an_answer_holds_its_support(
    served, docs, capsys
) -> None:
    _, off, _ = run(capsys, "ask", "What is the population of Peru?", "--docs", str(docs),
                    "--server", "http://h:1", "--json", "--no-refusal", services=served.services)
    assert json.loads(off)["refusal"] is None
    _, out, _ = run(capsys, "ask", "What is the capital of France?", "--docs", str(docs),
                    "--server", "http://h:1", "--json", services=served.services)
    refusal = json.loads(out)["refusal"]
    assert refusal["support"] >= refusal["threshold"] and not json.loads(out)["abstained"]
    assert refusal["reason"].startswith(f"support {refusal['support']:.2f} >= threshold 0.5")


@pytest.mark.parametrize("option", [["--no-refusal"], ["--refusal-threshold", "0"]])
def test_refusal_can_be_turned_off(served, docs, capsys, option) -> None:
    code, out, err = run(capsys, "ask", "What is the population of Peru?", "--docs", str(docs),
                         "--server", "http://h:1", "--json", *option, services=served.services)
    answer = json.loads(out)
    assert code == 0, err
    assert answer["abstained"] is False and answer["text"] == "Paris is the capital of France [1]."
    assert len(served.server.bodies) == 1


def test_the_refusal_options_reach_the_request(fake, docs, capsys) -> None:
    run(capsys, "ask", "capital of France?", "--docs", str(docs), "--refusal-threshold", "0.6",
        services=fake)
    assert fake.request.refusal is not None and fake.request.refusal.limit == 0.6
    fake.generator.requests.clear()
    run(capsys, "ask", "capital of France?", "--docs", str(docs), "--no-refusal", services=fake)
    assert fake.request.refusal is None


@pytest.mark.parametrize(("argv", "message"), [
    (["--refusal-threshold", "-1"], "must be a number >= 0, got -1"),
    (["--refusal-threshold", "high"], "'high' is not a number"),
    (["--refusal-threshold", "0.2", "--no-refusal"], "not allowed with argument"),
])
def test_a_bad_refusal_option_is_a_usage_error(fake, docs, capsys, argv, message) -> None:
    code, _, err = run(capsys, "ask", "q?", "--docs", str(docs), *argv, services=fake)
    assert code == 2 and message in err and "Traceback" not in err


ASK_IN_A_PROCESS = """
import json, sys
from citeformer.answers import cited_answer
from citeformer.app import Services, main

class Scripted:
    def answer(self, request):
        return cited_answer(request, "Paris is the capital of France [1].", "stop",
                            prompt_tokens=1, generated_tokens=1)

def embed(texts):
    return [[t.count(c) for c in "aeiou"] for t in texts]

code = main(["ask", "What is the capital of France?", "--docs", sys.argv[1]],
            services=Services(load_model=lambda *args, **kwargs: Scripted(), embed=embed))
print(json.dumps([code, sorted(sys.modules)]))
"""


def test_the_command_imports_what_its_services_need_and_nothing_more(docs) -> None:
    """Without --server nothing of the server's path; no torch or transformers of its own."""
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-c", ASK_IN_A_PROCESS, str(docs)],
                            capture_output=True, text=True, timeout=120, check=True)
    code, modules = json.loads(result.stdout.splitlines()[-1])
    assert code == 0, result.stderr
    heavy = ("citeformer.server", "httpx", "torch", "transformers", "sentence_transformers",
             "scipy")
    assert [name for name in heavy if name in modules] == []
