"""Does the installed llama-cpp-python run the embedded model on this CPU? Exit 0 if it does.

``make test`` runs this right after installing llama.cpp, so a build that crashes on this
machine's CPU stops the set-up with its exit code instead of failing the server tests later as
"connection refused". A prompt of several tokens is what matters: it runs llama.cpp's matrix
kernels, where a wheel built for another CPU's instruction sets crashed (a one-token prompt ran).

    python tests/server/llama_smoke.py            # prints the build's features and one completion
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# Run as a script from the checkout: the tests package is importable from its root.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.server.llama_server import describe  # noqa: E402

PROMPT = (
    "<|im_start|>user\nWhen was the Eiffel Tower completed?<|im_end|>\n<|im_start|>assistant\n"
)

_CHILD = f"""
import llama_cpp
from citeformer.default_model import gguf_path
print(llama_cpp.llama_print_system_info().decode(), flush=True)
llama = llama_cpp.Llama(str(gguf_path()), n_ctx=512, n_threads=1, verbose=False)
out = llama({PROMPT!r}, max_tokens=8, temperature=0.0)
print(repr(out["choices"][0]["text"]), out["usage"]["prompt_tokens"], "prompt tokens")
"""


def run() -> subprocess.CompletedProcess[str]:
    """Load the embedded GGUF in a child process and complete one multi-token prompt."""
    return subprocess.run(
        [sys.executable, "-X", "faulthandler", "-c", _CHILD],
        capture_output=True, text=True, timeout=300, check=False,
    )


def main() -> int:
    done = run()
    if done.returncode != 0:
        print(
            "llama-cpp-python cannot run the embedded model on this CPU: "
            f"{describe(done.returncode)}\n{done.stdout}{done.stderr[-3000:]}\n"
            "Rebuild it with the Makefile's LLAMA_CPP_CMAKE_ARGS (rm -rf the wheel folder under "
            "~/.cache/citeformer/llama-cpp-wheels, then make test).",
            file=sys.stderr,
        )
        return 1
    print(done.stdout, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
