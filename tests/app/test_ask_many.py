"""Unit tests for citeformer.app.ask_many: ``citeformer ask --questions FILE`` with scripted
generators (no model), through ``main``."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from citeformer import AnswerGenerator, CitedAnswer, GenerationRequest, PromptTooLongError
from citeformer.app import Services, main
from citeformer.app.ask_many import BatchAnswerer, ProgressBar
from citeformer.testing import FakeGenerator
from tests.app.conftest import toy_embed

QUESTIONS = [
    "What is the capital of France?",
    "What is the capital of Germany?",
    "Where is Paris?",
    "Where is Berlin?",
    "Which city is older?",
]


class BatchingFake(FakeGenerator):
    """A ``FakeGenerator`` with ``answer_batch``, which records the requests of each call."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.batches: list[list[GenerationRequest]] = []
        self.batch_sizes: list[int] = []

    def answer_batch(
        self, requests: Sequence[GenerationRequest], *, batch_size: int = 8
    ) -> list[CitedAnswer]:
        self.batches.append(list(requests))
        self.batch_sizes.append(batch_size)
        # As CiteGenerator does: a row that cannot be answered stops the whole call.
        return [self.answer(request) for request in requests]


def services(generator: AnswerGenerator, warnings: list[str] | None = None) -> Services:
    def load(model: str | None, *, progress: bool, **_: object) -> AnswerGenerator:
        return generator

    return Services(load_model=load, embed=toy_embed,
                    warn=warnings.append if warnings is not None else print)


def questions_file(tmp_path: Path, lines: Sequence[str], name: str = "questions.txt") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def run(capsys, *argv: str, services: Services) -> tuple[int, list[dict], str]:
    code = main(list(argv), services=services)
    captured = capsys.readouterr()
    return code, [json.loads(line) for line in captured.out.splitlines()], captured.err


def test_every_question_gets_one_json_line_in_order(docs, tmp_path, capsys) -> None:
    fake = BatchingFake("It is Paris [1].")
    path = questions_file(tmp_path, QUESTIONS)
    code, answers, err = run(capsys, "ask", "--questions", str(path), "--docs", str(docs),
                             "--batch-size", "2", services=services(fake))
    assert code == 0, err
    assert [(a["line"], a["question"]) for a in answers] == list(enumerate(QUESTIONS, start=1))
    # One batched call per --batch-size questions, in file order.
    assert [[r.question for r in batch] for batch in fake.batches] == [
        QUESTIONS[0:2], QUESTIONS[2:4], QUESTIONS[4:5],
    ]
    assert fake.batch_sizes == [2, 2, 2]
    for answer, request in zip(answers, fake.requests, strict=True):
        assert answer["text"] == "It is Paris [1]."
        assert answer["policy"] == "required"
        assert [s["text"] for s in answer["sources"]] == [s.text for s in request.sources]
        (citation,) = answer["citations"]
        assert citation["evidence"]["path"].endswith((".md", ".txt"))


def test_the_lines_are_the_json_objects_of_single_questions(docs, tmp_path, capsys) -> None:
    fake = BatchingFake("It is Paris [1].")
    path = questions_file(tmp_path, QUESTIONS[:1])
    code, (many,), _ = run(capsys, "ask", "--questions", str(path), "--docs", str(docs), "-q",
                           services=services(fake))
    assert code == 0
    main(["ask", QUESTIONS[0], "--docs", str(docs), "--json", "-q"], services=services(fake))
    single = json.loads(capsys.readouterr().out)
    assert list(many) == ["line", *single] and many == {"line": 1, **single}


def test_retrieval_runs_per_question(docs, tmp_path, capsys) -> None:
    fake = BatchingFake("It is [1].")
    path = questions_file(tmp_path, ["Paris, France?", "Berlin, Germany?"])
    code, answers, _ = run(capsys, "ask", "--questions", str(path), "--docs", str(docs),
                           "-k", "1", "-q", services=services(fake))
    assert code == 0
    assert [a["sources"][0]["path"].rsplit("/", 1)[1] for a in answers] == [
        "paris.md", "berlin.txt",
    ]


def test_a_second_run_embeds_only_the_questions(docs, tmp_path, capsys) -> None:
    embedded: list[str] = []

    def embed(texts: Sequence[str]) -> list[list[float]]:
        embedded.extend(texts)
        return toy_embed(texts)

    fake = BatchingFake("It is Paris [1].")
    path = questions_file(tmp_path, QUESTIONS)
    argv = ["ask", "--questions", str(path), "--docs", str(docs), "-q"]
    many = Services(load_model=lambda model, **_: fake, embed=embed)
    first = run(capsys, *argv, services=many)
    assert len(embedded) == 2 + len(QUESTIONS)  # two documents of one passage each
    embedded.clear()
    assert run(capsys, *argv, services=many) == first
    assert embedded == QUESTIONS
    embedded.clear()
    run(capsys, *argv, "--no-index-cache", services=many)
    assert len(embedded) == 2 + len(QUESTIONS)


def test_a_generator_without_answer_batch_answers_one_by_one(docs, tmp_path, capsys) -> None:
    fake = FakeGenerator("It is Paris [1].")
    path = questions_file(tmp_path, QUESTIONS)
    code, answers, _ = run(capsys, "ask", "--questions", str(path), "--docs", str(docs), "-q",
                           services=services(fake.sync_only()))
    assert code == 0
    assert [r.question for r in fake.requests] == QUESTIONS
    assert len(answers) == len(QUESTIONS)


def test_bad_lines_get_error_objects_and_exit_1_without_losing_the_rest(
    docs, tmp_path, capsys
) -> None:
    fake = BatchingFake("It is Paris [1].")
    path = questions_file(tmp_path, [
        '{"question": "What is the capital of France?"}',
        "not json at all",
        "",
        '{"question": "  "}',
        '{"question": "Where is Berlin?"}',
    ], name="questions.jsonl")
    warnings: list[str] = []
    code, answers, err = run(capsys, "ask", "--questions", str(path), "--docs", str(docs),
                             services=services(fake, warnings))
    assert code == 1
    assert [a["line"] for a in answers] == [1, 2, 4, 5]
    assert answers[0]["text"] == answers[3]["text"] == "It is Paris [1]."
    assert answers[1] == {"line": 2, "question": None,
                          "error": answers[1]["error"]}
    assert answers[1]["error"].startswith("not JSON")
    assert answers[2] == {"line": 4, "question": "  ", "error": "the question is empty"}
    assert [w.split(":")[0] for w in warnings] == ["line 2", "line 4"]
    assert err.splitlines()[-1] == (
        "citeformer: error: 2 of 4 question(s) could not be answered (line(s) 2, 4); "
        'each has an "error" object in its place in the output'
    )
    assert "Traceback" not in err
    assert [r.question for r in fake.requests] == ["What is the capital of France?",
                                                    "Where is Berlin?"]


def test_a_failing_row_is_answered_alone_and_the_others_keep_their_answers(
    docs, tmp_path, capsys
) -> None:
    def script(request: GenerationRequest) -> str:
        if "Berlin" in request.question:
            raise PromptTooLongError("the prompt is 900 tokens but the context holds 512")
        return "It is Paris [1]."

    fake = BatchingFake(script)
    path = questions_file(tmp_path, QUESTIONS)
    code, answers, err = run(capsys, "ask", "--questions", str(path), "--docs", str(docs),
                             "--batch-size", "5", "-q", services=services(fake, []))
    assert code == 1
    assert [("error" in a) for a in answers] == [False, False, False, True, False]
    assert answers[3] == {"line": 4, "question": "Where is Berlin?",
                          "error": "the prompt is 900 tokens but the context holds 512"}
    assert len(fake.batches) == 1  # the batch failed, then each row went alone
    assert [r.question for r in fake.requests[4:]] == QUESTIONS  # after the batch's 4 answers
    assert "1 of 5 question(s) could not be answered (line(s) 4)" in err


def test_hostile_lines_cost_only_themselves(docs, tmp_path, capsys) -> None:
    # A line of 100,000 "[" (JSON nested past the recursion limit) and a lone surrogate once
    # killed the run with a raw RecursionError or TypeError and an empty output.
    fake = BatchingFake("It is Paris [1].")
    path = questions_file(tmp_path, [
        '{"question": "What is the capital of France?"}',
        "[" * 100_000,
        '{"question": "\\udcff bees?"}',
        '{"question": "Where is Berlin?"}',
    ], name="questions.jsonl")
    code, answers, err = run(capsys, "ask", "--questions", str(path), "--docs", str(docs),
                             "-q", services=services(fake, []))
    assert code == 1
    assert [a["line"] for a in answers] == [1, 2, 3, 4]
    assert answers[0]["text"] == answers[3]["text"] == "It is Paris [1]."
    assert answers[1]["error"].startswith("JSON nested too deeply")
    assert answers[2]["question"] == "\\udcff bees?"  # escaped, so the line can be written
    assert "lone surrogate (U+DCFF) at character 0" in answers[2]["error"]
    assert "unexpected" not in err and "Traceback" not in err


def test_an_unexpected_error_costs_only_its_line(docs, tmp_path, capsys) -> None:
    def script(request: GenerationRequest) -> str:
        if "Berlin" in request.question:
            raise RecursionError("maximum recursion depth exceeded")
        return "It is Paris [1]."

    fake = BatchingFake(script)
    path = questions_file(tmp_path, QUESTIONS)
    code, answers, err = run(capsys, "ask", "--questions", str(path), "--docs", str(docs),
                             "--batch-size", "2", "-q", services=services(fake, []))
    assert code == 1
    assert [("error" in a) for a in answers] == [False, False, False, True, False]
    assert answers[3]["error"] == "unexpected RecursionError: maximum recursion depth exceeded"
    assert [a["text"] for a in answers if "text" in a] == ["It is Paris [1]."] * 4


def test_a_thousand_lines_with_ten_hostile_ones(docs, tmp_path, capsys) -> None:
    hostile = ["[" * 100_000, '{"question": "\\udcff?"}', "not json", '{"question": ""}',
               '{"q": 1}']
    lines = [
        hostile[n // 100 % 5] if n % 100 == 50 else json.dumps({"question": f"Question {n}?"})
        for n in range(1000)
    ]
    fake = BatchingFake("It is Paris [1].")
    path = questions_file(tmp_path, lines, name="questions.jsonl")
    code, answers, _ = run(capsys, "ask", "--questions", str(path), "--docs", str(docs),
                           "--batch-size", "16", "-q", services=services(fake, []))
    assert code == 1
    assert [a["line"] for a in answers] == list(range(1, 1001))
    assert sum("error" in a for a in answers) == 10
    assert sum(a.get("text") == "It is Paris [1]." for a in answers) == 990


SLOW_RUN = """
import sys, time
from citeformer.app import Services, main
from citeformer.testing import FakeGenerator
from tests.app.conftest import toy_embed

def slow(request):
    time.sleep(0.05)
    return "It is Paris [1]."

services = Services(load_model=lambda *a, **k: FakeGenerator(slow), embed=toy_embed,
                    warn=lambda message: None)
sys.exit(main(sys.argv[1:], services=services))
"""


def test_a_run_killed_halfway_leaves_every_finished_line(docs, tmp_path) -> None:
    path = questions_file(tmp_path, [f"Question {n}?" for n in range(400)])
    output = tmp_path / "answers.jsonl"
    process = subprocess.Popen(
        [sys.executable, "-c", SLOW_RUN, "ask", "--questions", str(path), "--docs", str(docs),
         "--batch-size", "4", "--output", str(output), "-q"],
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (
            not output.exists() or output.read_text(encoding="utf-8").count("\n") < 20
        ):
            time.sleep(0.05)
    finally:
        process.kill()
        process.wait()
    lines = output.read_text(encoding="utf-8").splitlines()
    assert 20 <= len(lines) < 400  # killed halfway
    assert [json.loads(line)["line"] for line in lines] == list(range(1, len(lines) + 1))


def test_only_bad_lines_load_no_model(docs, tmp_path, capsys) -> None:
    def load(model: str | None, *, progress: bool, **_: object) -> AnswerGenerator:
        raise AssertionError("nothing to answer, so no model")

    path = questions_file(tmp_path, ["{oops"], name="q.jsonl")
    code = main(["ask", "--questions", str(path), "--docs", str(docs), "-q"],
                services=Services(load_model=load, embed=toy_embed, warn=lambda _: None))
    out = capsys.readouterr().out
    assert code == 1 and json.loads(out)["line"] == 1


def test_output_file_gets_the_answers_and_stdout_stays_empty(docs, tmp_path, capsys) -> None:
    path = questions_file(tmp_path, QUESTIONS[:2])
    target = tmp_path / "answers.jsonl"
    code = main(["ask", "--questions", str(path), "--docs", str(docs), "-o", str(target), "-q"],
                services=services(BatchingFake("It is Paris [1].")))
    assert code == 0 and capsys.readouterr().out == ""
    lines = target.read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["line"] for line in lines] == [1, 2]


def test_output_onto_the_questions_file_is_refused(docs, tmp_path, capsys) -> None:
    path = questions_file(tmp_path, QUESTIONS[:2])
    code = main(["ask", "--questions", str(path), "--docs", str(docs), "-o", str(path)],
                services=services(BatchingFake()))
    assert code == 2
    assert "is the questions file itself" in capsys.readouterr().err
    assert path.read_text(encoding="utf-8").splitlines() == QUESTIONS[:2]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--questions", "{missing}"], "does not exist"),
        (["--questions", "{questions}", "-o", "{tmp}/no/such/folder/out.jsonl"],
         "cannot write the answers to"),
    ],
)
def test_unusable_files_exit_2_before_any_model(docs, tmp_path, capsys, argv, message) -> None:
    def load(model: str | None, *, progress: bool, **_: object) -> AnswerGenerator:
        raise AssertionError("checked before loading")

    path = questions_file(tmp_path, QUESTIONS[:1])
    argv = [a.format(missing=tmp_path / "none.txt", questions=path, tmp=tmp_path) for a in argv]
    code = main(["ask", *argv, "--docs", str(docs)],
                services=Services(load_model=load, embed=toy_embed))
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["ask", "--docs", "d"], "give a QUESTION"),
        (["ask", "q?", "--questions", "f.txt", "--docs", "d"], "not both"),
        (["ask", "--questions", "f.txt", "--stream", "--docs", "d"], "--stream"),
        (["ask", "q?", "--output", "out.jsonl", "--docs", "d"], "--output needs --questions"),
        (["ask", "q?", "--batch-size", "4", "--docs", "d"], "--batch-size needs --questions"),
        (["ask", "--questions", "f.txt", "--batch-size", "0", "--docs", "d"],
         "must be at least 1"),
    ],
)
def test_usage_errors(capsys, argv, message) -> None:
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and "usage: citeformer ask" in err and message in err


def test_progress_on_stderr_and_quiet_silences_it(docs, tmp_path, capsys) -> None:
    path = questions_file(tmp_path, QUESTIONS)
    code, _, err = run(capsys, "ask", "--questions", str(path), "--docs", str(docs),
                       "--batch-size", "2", services=services(BatchingFake("It is [1].")))
    assert code == 0
    assert re.search(r"citeformer: 100%\|[^|]*\| 5/5 \[", err), err
    code, _, err = run(capsys, "ask", "--questions", str(path), "--docs", str(docs), "-q",
                       services=services(BatchingFake("It is [1].")))
    assert code == 0 and err == ""


def test_the_bar_moves_one_answer_at_a_time_with_the_time_left() -> None:
    # It once moved a batch at a time (0, then 3/3 at the end with the default batch of 8) and
    # showed no time left.
    screen = io.StringIO()
    bar = ProgressBar(4, enabled=True, stream=screen, redraw_s=0)
    for failed in (False, False, True, False):
        bar.advance(failed=failed)
    bar.close()
    states = re.findall(r"\| (\d)/4 \[([^\]]*)\]", screen.getvalue())
    assert [done for done, _ in states] == ["0", "1", "2", "3", "4", "4"]  # close redraws
    assert all("<" in timing for _, timing in states[1:])  # elapsed<left
    assert "question" in states[-1][1] and "1 failed" in states[-1][1]
    assert screen.getvalue().endswith("\n")


def test_questions_from_stdin(docs, capsys, monkeypatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("Where is Paris?\nWhere is Berlin?\n"))
    code, answers, _ = run(capsys, "ask", "--questions", "-", "--docs", str(docs), "-q",
                           services=services(BatchingFake("It is [1].")))
    assert code == 0 and [a["question"] for a in answers] == ["Where is Paris?",
                                                              "Where is Berlin?"]


# -- a server: requests side by side ----------------------------------------------------------


class ServedFake:
    """A served generator whose answers wait until ``parties`` requests are in flight at once."""

    model = "served-test"

    def __init__(self, parties: int) -> None:
        self.fake = FakeGenerator("It is Paris [1].")
        self.barrier = threading.Barrier(parties, timeout=10)
        self.threads: set[str] = set()

    def answer(self, request: GenerationRequest) -> CitedAnswer:
        self.threads.add(threading.current_thread().name)
        self.barrier.wait()  # sequential requests would never get past this
        return self.fake.answer(request)

    def answer_stream(self, request: GenerationRequest):  # pragma: no cover - not streamed
        raise AssertionError("--questions does not stream")


def test_a_server_gets_each_batch_side_by_side(docs, tmp_path, capsys) -> None:
    served = ServedFake(parties=2)

    def connect(url: str, model: str | None, engine: str) -> ServedFake:
        return served

    path = questions_file(tmp_path, QUESTIONS[:4])
    code, answers, err = run(
        capsys, "ask", "--questions", str(path), "--docs", str(docs), "--server", "http://h:1",
        "--batch-size", "2", "-q",
        services=Services(connect_server=connect, embed=toy_embed),  # type: ignore[arg-type]
    )
    assert code == 0, err
    assert [a["question"] for a in answers] == QUESTIONS[:4]  # in file order all the same
    assert len(served.threads) == 2


def test_batch_answerer_reports_each_error_in_place() -> None:
    def script(request: GenerationRequest) -> str:
        if request.question == "bad?":
            raise PromptTooLongError("too long")
        return "Fine [1]."

    from citeformer import build_request

    requests = [build_request(q, ["A source."]) for q in ("good?", "bad?", "good again?")]
    for generator in (FakeGenerator(script), BatchingFake(script)):
        answerer = BatchAnswerer(generator, batch_size=3, side_by_side=True)
        outcomes = answerer.answer(requests)
        answerer.close()
        assert isinstance(outcomes[1], PromptTooLongError)
        assert [o.text for o in (outcomes[0], outcomes[2])] == ["Fine [1].", "Fine [1]."]
