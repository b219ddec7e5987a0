"""Build hooks: the notebooks and the benchmark report join the site, the notebooks run in a
kernel of the interpreter that runs mkdocs, and their pages leave out the build machine's paths.

The notebooks live in ``notebooks/`` and the report in ``benchmarks/README.md``, outside
``docs/``, so that each has one copy; they are added to the site's files here, where
mkdocs-jupyter (``execute: true`` in ``mkdocs.yml``) then finds and executes the notebooks.
"""

from __future__ import annotations

import html
import json
import os
import re
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

_STDERR_OUTPUT = re.compile(
    r'<div class="jp-OutputArea-child">\s*<div class="jp-OutputPrompt jp-OutputArea-prompt"></div>'
    r'\s*<div class="jp-RenderedText jp-OutputArea-output" '
    r'data-mime-type="application/vnd.jupyter.stderr"[^>]*>\s*<pre>(?P<text>.*?)</pre>\s*</div>'
    r"\s*</div>\s*",
    re.DOTALL,
)
_EMPTY_OUTPUT_AREA = re.compile(r'<div class="jp-OutputArea jp-Cell-outputArea">\s*</div>\s*')


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


def build_paths() -> list[str]:
    """The folders of the machine that builds the site, as they appear in a page's HTML."""
    folders = {str(ROOT), sys.prefix, sys.base_prefix, os.path.expanduser("~")}
    return sorted(html.escape(folder) for folder in folders if len(folder) > 1)


def drop_local_stderr(page_html: str, paths: list[str]) -> str:
    """``page_html`` without the stderr outputs that name one of ``paths``.

    Such an output is a warning about the build's own environment (a library's file and line,
    tqdm's missing ipywidgets), not what the notebook shows a reader; left in, it would also be
    what the search finds. Other stderr, the notebooks' own warnings included, stays.
    """
    def keep(match: re.Match[str]) -> str:
        return "" if any(path in match.group("text") for path in paths) else match.group(0)

    return _EMPTY_OUTPUT_AREA.sub("", _STDERR_OUTPUT.sub(keep, page_html))


def on_page_content(page_html: str, page: Any, config: Any, files: Files) -> str:
    """Leave the build machine's paths out of the executed notebooks' pages (and so the search)."""
    if not page.file.src_uri.endswith(".ipynb"):
        return page_html
    return drop_local_stderr(page_html, build_paths())
