"""Build hooks: the notebooks and the benchmark report join the site, and the notebooks run in a
kernel of the interpreter that runs mkdocs.

The notebooks live in ``notebooks/`` and the report in ``benchmarks/README.md``, outside
``docs/``, so that each has one copy; they are added to the site's files here, where
mkdocs-jupyter (``execute: true`` in ``mkdocs.yml``) then finds and executes the notebooks.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]
KERNEL_NAME = "citeformer-docs"
"""The kernel ``mkdocs.yml`` names: ipykernel in this very interpreter."""

EXTERNAL = [("notebooks", "*.ipynb"), ("benchmarks/results", "*.png")]
"""Files that keep their path under the root in the site: (folder, glob)."""
REPORT = ("benchmarks/README.md", "benchmarks/report.md")
"""The benchmark report and its page (``benchmarks/README.md`` would be ``benchmarks.md``'s URL)."""

_kernels: tempfile.TemporaryDirectory[str] | None = None


def on_config(config: Any) -> Any:
    """Install the ``citeformer-docs`` kernelspec for this build only, so the notebooks run in the
    environment being documented whatever kernels the user has installed."""
    global _kernels
    if _kernels is None:
        _kernels = tempfile.TemporaryDirectory(prefix="citeformer-kernels-")
        spec = Path(_kernels.name) / "kernels" / KERNEL_NAME
        spec.mkdir(parents=True)
        (spec / "kernel.json").write_text(
            json.dumps({
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "citeformer (docs build)",
                "language": "python",
            }),
            encoding="utf-8",
        )
        paths = [_kernels.name, *filter(None, os.environ.get("JUPYTER_PATH", "").split(os.pathsep))]
        os.environ["JUPYTER_PATH"] = os.pathsep.join(paths)
    return config


# Before mkdocs-jupyter's on_files, which turns the notebooks it finds into pages.
@event_priority(100)
def on_files(files: Files, config: Any) -> Files:
    """Add the notebooks, the report and its plots to the site's files."""
    for folder, pattern in EXTERNAL:
        for path in sorted((ROOT / folder).glob(pattern)):
            # A real file under a source folder of its own: mkdocs-jupyter reads the notebook
            # from its path and runs it there, in notebooks/, as Jupyter would.
            files.append(File(
                path.relative_to(ROOT).as_posix(), str(ROOT), config["site_dir"],
                config["use_directory_urls"],
            ))
    src, dest = REPORT
    files.append(File.generated(config, dest, abs_src_path=str(ROOT / src)))
    return files
