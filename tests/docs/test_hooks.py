"""The site's build hooks (``docs/hooks.py``): what they take out of an executed notebook's page."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("mkdocs")

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
assert _spec is not None and _spec.loader is not None
hooks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hooks)


def _stderr(text: str) -> str:
    return (
        '<div class="jp-OutputArea-child">\n'
        '<div class="jp-OutputPrompt jp-OutputArea-prompt"></div>\n'
        '<div class="jp-RenderedText jp-OutputArea-output" '
        'data-mime-type="application/vnd.jupyter.stderr" tabindex="0">\n'
        f"<pre>{text}\n</pre>\n</div>\n</div>\n"
    )


def _area(*children: str) -> str:
    return '<div class="jp-OutputArea jp-Cell-outputArea">\n' + "".join(children) + "</div>\n"


def test_stderr_naming_a_build_path_is_dropped_with_its_empty_area() -> None:
    warning = _stderr("/home/me/venv/lib/tqdm/auto.py:21: TqdmWarning: IProgress not found.")
    page = "<p>Cell</p>\n" + _area(warning)
    assert hooks.drop_local_stderr(page, ["/home/me"]) == "<p>Cell</p>\n"


def test_other_stderr_stays() -> None:
    cut = _stderr("the answer was cut at max_new_tokens=48 before its last claim was cited")
    local = _stderr("/home/me/venv/lib/x.py:3: UserWarning: something")
    page = _area(local, cut)
    assert hooks.drop_local_stderr(page, ["/home/me"]) == _area(cut)


def test_the_build_paths_include_the_checkout_and_the_interpreter() -> None:
    import sys

    paths = hooks.build_paths()
    assert str(ROOT) in paths and sys.prefix in paths
