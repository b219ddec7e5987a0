"""Starting and stopping a real llama.cpp server (llama-cpp-python's) on loopback, serving the
embedded model's GGUF."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from citeformer.default_model import gguf_path

READY_TIMEOUT_S = 120.0
LOG_EXCERPT_CHARS = 3000
CRASH_HEADER = "Fatal Python error:"


@dataclass
class LlamaServer:
    """One ``python -m llama_cpp.server`` process and its address."""

    process: subprocess.Popen[bytes]
    url: str
    log: Path

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)

    def kill(self) -> None:
        """Gone at once, as a crashed or preempted server is: no clean shutdown."""
        self.process.kill()
        self.process.wait(timeout=10)

    def log_tail(self) -> str:
        """The log's last lines or, after a crash, faulthandler's dump from its header on: the
        innermost frames come first there, and a long stack would push them out of a tail."""
        text = self.log.read_text(encoding="utf-8", errors="replace")
        crash = text.rfind(CRASH_HEADER)
        if crash >= 0:
            return text[crash:crash + LOG_EXCERPT_CHARS]
        return text[-LOG_EXCERPT_CHARS:]

    def exit_report(self) -> str | None:
        """``None`` while the server runs; once it is gone, its exit status and the end of its log
        (or its crash dump)."""
        code = self.process.poll()
        if code is None:
            return None
        return (
            f"the llama.cpp server at {self.url} is gone ({describe(code)}); from "
            f"its log {self.log}:\n{self.log_tail()}"
        )


def describe(returncode: int) -> str:
    """``-11`` as ``exit -11 (SIGSEGV)``: how a process that died of a signal ended."""
    if returncode < 0:
        try:
            return f"exit {returncode} ({signal.Signals(-returncode).name})"
        except ValueError:
            pass
    return f"exit {returncode}"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_llama_server(n_ctx: int = 2048) -> LlamaServer:
    """Start a server on a free loopback port and wait until it lists its model."""
    port = free_port()
    log = Path(tempfile.mkstemp(prefix="llama-server-", suffix=".log")[1])
    # faulthandler: a crash in llama.cpp leaves the Python stack that called it in the log.
    command = [
        sys.executable, "-X", "faulthandler", "-m", "llama_cpp.server", "--model", str(gguf_path()),
        "--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(n_ctx),
        "--model_alias", "smollm2-135m", "--verbose", "False",
    ]
    with log.open("wb") as sink:
        process = subprocess.Popen(
            command, stdout=sink, stderr=subprocess.STDOUT,
            env={**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")},
        )
    server = LlamaServer(process, f"http://127.0.0.1:{port}", log)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(str(server.exit_report()))
        try:
            if httpx.get(f"{server.url}/v1/models", timeout=2).status_code == 200:
                return server
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    server.stop()
    raise RuntimeError(
        f"the llama.cpp server was not ready after {READY_TIMEOUT_S:.0f}s:\n{server.log_tail()}"
    )
