"""``--model`` with a hub id: a hub that cannot be reached or has no such model ends the command
at once with a usage error (exit 2), and ``--quiet`` keeps the hub client's retry lines off stderr.

The hub is a server on 127.0.0.1 (``HF_ENDPOINT``) answering as the HuggingFace hub does, or a
closed port; the cache is an empty folder.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from citeformer.app import Services, main
from citeformer.app.services import load_model
from tests.app.conftest import toy_embed

ROOT = Path(__file__).resolve().parents[2]


def hub_answering(status: int, error_code: str) -> type[BaseHTTPRequestHandler]:
    class Hub(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            self.send_response(status)
            self.send_header("X-Error-Code", error_code)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"error": "Repository not found"}')

        do_HEAD = do_GET  # noqa: N815

        def log_message(self, *args: object) -> None:
            pass

    return Hub


@contextlib.contextmanager
def hub(status: int, error_code: str) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), hub_answering(status, error_code))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def closed_port() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"  # nothing listens once it closes


def ask_with_hub(
    endpoint: str, tmp_path: Path, model: str = "nonexist/xyz"
) -> tuple[int, str, float]:
    env = {**os.environ, "HF_ENDPOINT": endpoint, "HF_HUB_CACHE": str(tmp_path / "hub"),
           "HF_HUB_OFFLINE": "0", "TRANSFORMERS_OFFLINE": "0"}
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "citeformer", "ask", "q?", "--docs", "examples/docs", "--model",
         model, "-q"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )
    assert result.stdout == ""
    return result.returncode, result.stderr, time.monotonic() - started


def test_an_unreachable_hub_is_one_line_and_exit_2(tmp_path) -> None:
    code, err, took = ask_with_hub(closed_port(), tmp_path)
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("citeformer: error: could not reach the "
                                                   "HuggingFace hub"), err
    assert "'nonexist/xyz'" in err and "pass --model a local folder" in err
    assert "Retry" not in err
    assert took < 60, took  # no retry rounds (they take 46 s); generous for a loaded machine


@pytest.mark.parametrize(("status", "code", "words"), [
    (404, "RepoNotFound", "no model 'nonexist/xyz' on the HuggingFace hub"),
    (401, "RepoNotFound", "no model 'nonexist/xyz' on the HuggingFace hub"),
    (403, "GatedRepo", "model 'nonexist/xyz' is gated on the HuggingFace hub"),
])
def test_a_model_the_hub_does_not_serve_is_named(tmp_path, status, code, words) -> None:
    with hub(status, code) as endpoint:
        exit_code, err, _ = ask_with_hub(endpoint, tmp_path)
    assert exit_code == 2, err
    assert err.count("\n") == 1 and words in err, err


def test_an_invalid_hub_id_is_named(docs, capsys) -> None:
    code = main(["ask", "q", "--docs", str(docs), "--model", "bad id", "-q"],
                services=Services(embed=toy_embed))
    err = capsys.readouterr().err
    assert code == 2
    assert "--model 'bad id' is neither a local folder nor a HuggingFace hub id" in err


def test_offline_without_the_model_cached_says_so(monkeypatch, docs, capsys) -> None:
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    code = main(["ask", "q", "--docs", str(docs), "--model", "owner/not-cached", "-q"],
                services=Services(embed=toy_embed))
    err = capsys.readouterr().err
    assert code == 2
    assert "'owner/not-cached' is not in the HuggingFace cache and HF_HUB_OFFLINE is set" in err


@pytest.mark.parametrize("progress", [False, True])
def test_hub_retry_warnings_only_without_quiet(monkeypatch, caplog, progress) -> None:
    import huggingface_hub

    from citeformer import CiteGenerator

    retries = logging.getLogger("huggingface_hub.utils._http")
    level = logging.getLogger("huggingface_hub").level

    def loading(name: str, **_: object) -> str:
        retries.warning("Retrying in 1s [Retry 1/5].")
        return "generator"

    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache", lambda *_: "config.json")
    monkeypatch.setattr(CiteGenerator, "from_pretrained", staticmethod(loading))
    assert load_model("owner/cached", progress=progress) == "generator"
    assert ("Retry 1/5" in caplog.text) is progress
    assert logging.getLogger("huggingface_hub").level == level  # put back
