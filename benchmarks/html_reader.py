"""Compare HTML readers for ``--docs``: text kept, frame dropped, tables, speed, hostile pages.

    python benchmarks/html_reader.py             # prints a table, writes results/html_reader.json
    python benchmarks/html_reader.py --readers citeformer trafilatura --repeat 1
    pip install trafilatura html-text inscriptis # the other readers (skipped when missing)

Readers: ``citeformer`` (``citeformer.app.html_text`` as it stands: lxml), ``html.parser`` (the
same module as of commit 2a197c9, which parsed with Python's ``html.parser``; read from git),
trafilatura (main-content extraction, tables included, and with ``favor_recall``), html-text
and inscriptis (whole-page text).

Pages: about 17 real ones (the Rust book, std and reference pages of the installed Rust docs,
found under ``~/.rustup``, and Python's own IDLE help page, a Sphinx page), and four pages built
here (a news article with semantic landmarks, the same article as anonymous ``<div>`` soup, a
statistics page with tables, a documentation page with highlighted code). For a real page the
main content is its ``<main>`` (rustdoc's ``#main-content``, Sphinx's ``role="main"``); what it
must keep is every ``<p>`` there (prose) and every line of its ``<pre>`` blocks (code), what it
must drop is every stretch of text outside it that does not also occur inside it (the frame:
menus, sidebars, help popups, footers). A table row is read row by row when one line of the
output holds all its cells, in order. Matching ignores white space.

Speed: megabytes of markup read per second over the real pages (best of ``--repeat``); and the
two hostile pages: 16,000 nested ``<div hidden>`` (320 KB) and 30,000 unclosed ``<a`` (60 KB).
For the readers that map text to file lines (both citeformer ones), ``lines`` is the share of
words whose reported line of the ``.html`` file holds them.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import signal
import subprocess
import sys
import sysconfig
import time
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from lxml import etree

HERE = Path(__file__).resolve().parent
BEFORE = "2a197c9"
"""The last commit whose reader parsed with Python's ``html.parser``."""

RUST_PAGES = [
    "book/ch00-00-introduction.html", "book/ch03-02-data-types.html",
    "book/ch04-01-what-is-ownership.html", "book/ch08-02-strings.html",
    "book/ch10-02-traits.html", "book/ch16-01-threads.html", "book/appendix-02-operators.html",
    "std/index.html", "std/collections/index.html", "std/fs/fn.read_to_string.html",
    "std/keyword.match.html", "std/option/enum.Option.html", "std/vec/struct.Vec.html",
    "std/string/struct.String.html", "reference/tokens.html", "reference/type-layout.html",
]
MAIN_REGIONS = ["//section[@id='main-content']", "//*[@role='main']", "//main"]
"""Where a real page's content is, tried in order: rustdoc, Sphinx, mdBook."""

HOSTILE = {
    "nested hidden": "<p>Before.</p>" + "<div hidden>secret" * 16_000 + "</div>" * 16_000,
    "unclosed <a": "<p>Text.</p>" + "<a" * 30_000,
}
HOSTILE_LIMIT = 120
"""Seconds after which a reader's hostile page is given up (reported as over the limit)."""

WHITE = re.compile(r"\s+")
Reader = Callable[[str], str]


@dataclass
class Page:
    """A page with what a reader must keep and drop of it."""

    name: str
    markup: str
    prose: list[str] = field(default_factory=list)
    code: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)
    frame: list[str] = field(default_factory=list)
    real: bool = True


def squeeze(text: str) -> str:
    return WHITE.sub("", text)


# ------------------------------------------------------------------------------------ readers


def load_readers(names: Sequence[str]) -> dict[str, tuple[Reader, Callable[[str], Any] | None]]:
    """Each reader that can run here: its text function and, if it has one, its line-mapped one."""
    readers: dict[str, tuple[Reader, Callable[[str], Any] | None]] = {}
    for name in names:
        try:
            readers[name] = LOADERS[name]()
        except (ImportError, subprocess.CalledProcessError, OSError) as error:
            print(f"  {name}: not available ({str(error).splitlines()[0]})")
    return readers


def _citeformer() -> tuple[Reader, Callable[[str], Any]]:
    from citeformer.app.html_text import html_to_text

    return (lambda markup: html_to_text(markup).text), html_to_text


def _before() -> tuple[Reader, Callable[[str], Any]]:
    source = subprocess.run(
        ["git", "show", f"{BEFORE}:core/citeformer/app/html_text.py"],
        cwd=HERE.parent, capture_output=True, text=True, check=True,
    ).stdout
    module = types.ModuleType("html_text_before")
    sys.modules[module.__name__] = module  # dataclasses look their module up
    exec(compile(source, f"html_text.py@{BEFORE}", "exec"), module.__dict__)
    html_to_text = module.html_to_text
    return (lambda markup: html_to_text(markup).text), html_to_text


def _trafilatura(recall: bool) -> Callable[[], tuple[Reader, None]]:
    def load() -> tuple[Reader, None]:
        import trafilatura

        def read(markup: str) -> str:
            return trafilatura.extract(markup, include_tables=True, include_comments=False,
                                       favor_recall=recall, deduplicate=False) or ""
        return read, None
    return load


def _html_text() -> tuple[Reader, None]:
    import html_text

    return (lambda markup: html_text.extract_text(markup, guess_layout=True)), None


def _inscriptis() -> tuple[Reader, None]:
    import inscriptis

    return inscriptis.get_text, None


LOADERS: dict[str, Callable[[], tuple[Reader, Any]]] = {
    "citeformer": _citeformer,
    "html.parser": _before,
    "trafilatura": _trafilatura(False),
    "trafilatura recall": _trafilatura(True),
    "html-text": _html_text,
    "inscriptis": _inscriptis,
}


# -------------------------------------------------------------------------------------- pages


def rust_docs() -> Path | None:
    for root in sorted(Path.home().glob(".rustup/toolchains/*/share/doc/rust/html")):
        if (root / "book").is_dir() and (root / "std").is_dir():
            return root
    return None


def real_pages() -> list[Page]:
    files: list[Path] = []
    root = rust_docs()
    if root is None:
        print("  no Rust docs under ~/.rustup: the real pages are Python's IDLE help alone")
    else:
        files += [root / name for name in RUST_PAGES if (root / name).is_file()]
    idle = Path(sysconfig.get_paths()["stdlib"]) / "idlelib" / "help.html"
    if idle.is_file():
        files.append(idle)
    pages = []
    for file in files:
        markup = file.read_text(encoding="utf-8")
        name = file.name if root is None or not file.is_relative_to(root) else str(
            file.relative_to(root))
        pages.append(truth(name if file != idle else "python/idlelib/help.html", markup))
    return pages


def truth(name: str, markup: str) -> Page:
    """A real page with what its main region holds and what its frame holds."""
    root = etree.fromstring(markup.encode(), etree.HTMLParser(encoding="utf-8"))
    main = next((found[0] for path in MAIN_REGIONS if (found := root.xpath(path))), None)
    if main is None:
        raise ValueError(f"{name}: no main region")
    page = Page(name, markup)
    page.prose = [text for p in main.iter("p") if len(text := _text(p)) >= 25]
    page.code = [
        line.strip() for pre in main.iter("pre") for line in "".join(pre.itertext()).split("\n")
        if len(line.strip()) >= 8
    ]
    for row in main.iter("tr"):
        cells = [text for cell in row if cell.tag in ("td", "th") and (text := _text(cell))]
        if len(cells) >= 2:
            page.rows.append(cells)
    inside = squeeze("".join(main.itertext()))
    frame: dict[str, None] = {}
    for text in _outside(root, main):
        if len(text) >= 4 and re.search(r"[A-Za-z]", text) and squeeze(text) not in inside:
            frame[text] = None
    page.frame = list(frame)
    return page


def _text(element: Any) -> str:
    return " ".join("".join(element.itertext()).split())


def _outside(root: Any, main: Any) -> Iterator[str]:
    """The stretches of text of ``root`` outside ``main`` and outside code that is never shown."""
    unseen = {"script", "style", "template", "svg", "head", "noscript"}
    skip = set(main.iter()) | {
        node for element in root.iter(*unseen) for node in element.iter()
    }
    for element in root.iter(tag=etree.Element):
        if element not in skip and element.text:
            yield " ".join(element.text.split())
        parent = element.getparent()
        if element.tail and parent is not None and parent not in skip:
            yield " ".join(element.tail.split())


def built_pages() -> list[Page]:
    """Pages with a frame of their own, built here, and what each must keep and drop."""
    article = [
        "The city council approved the new tram line on Tuesday after a debate that lasted "
        "almost six hours and drew more than two hundred residents to the town hall.",
        "Construction of the eleven-kilometre line is expected to begin next spring, with the "
        "first trams running between the station and the university by the autumn of 2028.",
        "Opponents argued that the budget of 310 million euros would be better spent on buses, "
        "which they said could serve the outer districts sooner and at a fraction of the cost.",
        "The mayor replied that the tram would carry twice as many passengers as the bus routes "
        "it replaces, and that the national government would pay for sixty percent of it.",
        "Shop owners on the high street asked for compensation during the works, and the council "
        "agreed to set up a fund of two million euros for businesses that lose trade.",
    ]
    caption = "The planned route runs along the river before turning north to the campus."
    frame = ["Daily Courier", "Subscribe now", "Sports", "Weather", "Opinion",
             "We use cookies to improve your experience", "Accept all cookies",
             "Most read this week", "Ten hikes near the city", "Contact the newsroom",
             "Privacy policy", "All rights reserved"]
    paragraphs = "\n".join(f"<p>{text}</p>" for text in article)

    semantic = f"""<!doctype html><html><head><title>Tram line approved</title></head><body>
<div class="cookie-banner" role="dialog" aria-label="cookies"><p>We use cookies to improve your
experience.</p><button>Accept all cookies</button></div>
<header><div class="logo">Daily Courier</div><a href="/subscribe">Subscribe now</a></header>
<nav><ul><li><a href="/sports">Sports</a></li><li><a href="/weather">Weather</a></li>
<li><a href="/opinion">Opinion</a></li></ul></nav>
<main><article><h1>Council approves the tram line</h1><p class="byline">By Ana Lopez</p>
{paragraphs}
<figure><img src="route.png" alt=""><figcaption>{caption}</figcaption></figure>
</article></main>
<aside><h2>Most read this week</h2><ol><li>Ten hikes near the city</li></ol></aside>
<footer><a href="/contact">Contact the newsroom</a> <a href="/privacy">Privacy policy</a>
<p>&copy; 2026 Daily Courier. All rights reserved.</p></footer>
</body></html>"""

    soup = f"""<html><head><title>Tram line approved</title></head><body>
<div id="cookies"><div>We use cookies to improve your experience.</div>
<span class="btn">Accept all cookies</span></div>
<div id="top"><div class="logo">Daily Courier</div><a href="/subscribe">Subscribe now</a></div>
<div class="menu"><a href="/sports">Sports</a> <a href="/weather">Weather</a>
<a href="/opinion">Opinion</a></div>
<div id="wrap"><div class="col-8"><div class="headline">Council approves the tram line</div>
<div class="byline">By Ana Lopez</div>
{paragraphs.replace("<p>", '<div class="txt">').replace("</p>", "</div>")}
<div class="img"><img src="route.png"><div class="cap">{caption}</div></div></div>
<div class="col-4"><div class="box-title">Most read this week</div>
<div><a href="/hikes">Ten hikes near the city</a></div></div></div>
<div id="bottom"><a href="/contact">Contact the newsroom</a> <a href="/privacy">Privacy policy</a>
<div>&copy; 2026 Daily Courier. All rights reserved.</div></div>
</body></html>"""

    stats_prose = [
        "The table below lists the population of the five largest towns of the region at the "
        "last three censuses, as published by the national statistics office in March.",
        "Figures for 2021 include the villages that were merged into their towns in 2019, so "
        "the growth since 2011 is partly a change of boundaries rather than of residents.",
    ]
    rows = [["Town", "2001", "2011", "2021"], ["Northbridge", "48,200", "51,900", "58,430"],
            ["Eastwick", "31,050", "30,870", "29,940"], ["Millford", "22,400", "24,100",
                                                       "27,800"],
            ["Ashby on the Water", "12,300", "13,050", "15,610"],
            ["Kelsey", "9,870", "9,920", "10,400"]]
    budget = [["Item", "2025", "2026"], ["Schools", "41.2", "43.0"], ["Roads", "18.7", "16.9"],
              ["Libraries", "2.4", "2.6"]]

    def table(cells: list[list[str]], caption: str) -> str:
        head = "".join(f"<th>{cell}</th>" for cell in cells[0])
        body = "\n".join(
            f'<tr><th scope="row"><a href="/t/{row[0]}">{row[0]}</a></th>'
            + "".join(f"<td><b>{cell}</b></td>" if index == 1 else f"<td>{cell}</td>"
                      for index, cell in enumerate(row[1:]))
            + "</tr>" for row in cells[1:])
        return (f"<table><caption>{caption}</caption><thead><tr>{head}</tr></thead>"
                f"<tbody>\n{body}\n</tbody></table>")

    stats = f"""<!doctype html><html><head><title>Population</title></head><body>
<div role="banner"><span>Regional Statistics Office</span></div>
<nav aria-label="breadcrumbs"><a href="/">Home</a> / <a href="/people">People and places</a></nav>
<main><h1>Population of the largest towns</h1>
<p>{stats_prose[0]}</p>
{table(rows, "Residents at each census")}
<p>{stats_prose[1]}</p>
{table(budget, "Spending in millions of euros")}
</main>
<footer><p>Regional Statistics Office, Statistics House. Open data licence.</p></footer>
</body></html>"""

    docs_prose = [
        "The client reads its settings from the environment first and from the configuration "
        "file second, so a variable always wins over the same key in the file.",
        "Call connect with a timeout in seconds; a connection that is not established in time "
        "raises a TimeoutError that names the host and the time it waited.",
        "Retries are off by default because a retried write can be applied twice; turn them on "
        "only for requests that are safe to repeat.",
    ]
    code = ["from client import connect", "session = connect(host, timeout=5.0)",
            "for row in session.query(\"SELECT 1\"):", "print(row)"]
    highlighted = "\n".join([
        '<span class="kn">from</span> <span class="nn">client</span> '
        '<span class="kn">import</span> <span class="n">connect</span>',
        '<span class="n">session</span> <span class="o">=</span> <span class="n">connect'
        '</span>(<span class="n">host</span>, <span class="n">timeout</span>'
        '<span class="o">=</span><span class="mf">5.0</span>)',
        '<span class="k">for </span><span class="n">row</span><span class="k"> in </span>'
        '<span class="n">session</span>.<span class="n">query</span>(<span class="s">'
        '"SELECT 1"</span>):',
        '    <span class="nb">print</span>(<span class="n">row</span>)',
    ])
    docs = f"""<!doctype html><html><head><title>Connecting - Client docs</title></head><body>
<div class="md-header"><a class="md-logo">Client docs</a>
<form role="search"><input placeholder="Search the docs"></form></div>
<div class="md-sidebar md-sidebar--primary"><nav class="md-nav" aria-label="Navigation">
<ul><li><a href="/install">Installation guide</a></li><li><a href="/connect">Connecting</a></li>
<li><a href="/api">API reference</a></li></ul></nav></div>
<div class="md-content"><article class="md-content__inner"><h1>Connecting</h1>
<p>{docs_prose[0]}</p>
<div class="highlight"><pre><code>{highlighted}</code></pre></div>
<p>{docs_prose[1]}</p>
<div class="admonition warning"><p class="admonition-title">Warning</p><p>{docs_prose[2]}</p>
</div></article></div>
<footer class="md-footer"><nav class="md-footer__inner" aria-label="Footer">
<a href="/install">Previous: Installation guide</a><a href="/api">Next: API reference</a></nav>
<div class="md-copyright">Made with Material for MkDocs</div></footer>
</body></html>"""

    return [
        Page("built/article-landmarks.html", semantic, article + [caption], frame=frame,
             real=False),
        Page("built/article-div-soup.html", soup, article + [caption], frame=frame, real=False),
        Page("built/tables.html", stats, stats_prose, rows=rows + budget,
             frame=["Regional Statistics Office", "People and places", "Open data licence"],
             real=False),
        Page("built/docs-code.html", docs, docs_prose, code=code,
             frame=["Search the docs", "Installation guide", "API reference",
                    "Made with Material for MkDocs"], real=False),
    ]


# ----------------------------------------------------------------------------------- measuring


def found(units: list[str], output: str) -> tuple[int, int]:
    """How many of ``units`` the output holds, white space ignored."""
    flat = squeeze(output)
    return sum(squeeze(unit) in flat for unit in units), len(units)


def found_spaced(units: list[str], output: str) -> tuple[int, int]:
    """How many of ``units`` the output holds with their words apart (runs of space as one)."""
    flat = " ".join(output.split())
    return sum(" ".join(unit.split()) in flat for unit in units), len(units)


def rows_on_one_line(rows: list[list[str]], output: str) -> tuple[int, int]:
    lines = [squeeze(line) for line in output.splitlines()]
    return sum(any(_in_order([squeeze(cell) for cell in row], line) for line in lines)
               for row in rows), len(rows)


def _in_order(cells: list[str], line: str) -> bool:
    position = 0
    for cell in cells:
        position = line.find(cell, position)
        if position < 0:
            return False
        position += len(cell)
    return True


def line_accuracy(page: Page, read: Callable[[str], Any]) -> tuple[int, int]:
    """Words (of 4+ letters) whose reported ``.html`` line holds them."""
    result = read(page.markup)
    lines = page.markup.split("\n")
    right = total = 0
    for word in re.finditer(r"[A-Za-z]{4,}", result.text):
        total += 1
        right += word.group() in lines[result.lines.line_of(word.start()) - 1]
    return right, total


def best_time(read: Reader, markup: str, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        read(markup)
        best = min(best, time.perf_counter() - started)
    return best


class _Late(Exception):
    pass


def hostile_time(read: Reader, markup: str) -> tuple[float | None, str]:
    """Seconds to read ``markup`` (``None``: over ``HOSTILE_LIMIT``) and the text read."""
    def late(signum: int, frame: Any) -> None:
        raise _Late

    previous = signal.signal(signal.SIGALRM, late)
    signal.alarm(HOSTILE_LIMIT)
    started = time.perf_counter()
    try:
        text = read(markup)
    except _Late:
        return None, ""
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return time.perf_counter() - started, text


def ratio(pair: tuple[int, int]) -> float | None:
    return pair[0] / pair[1] if pair[1] else None


def add(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
    return a[0] + b[0], a[1] + b[1]


def measure(name: str, read: Reader, mapped: Callable[[str], Any] | None, pages: list[Page],
            repeat: int) -> dict[str, Any]:
    totals: dict[str, tuple[int, int]] = {}
    per_page = []
    seconds = 0.0
    size = 0
    for page in pages:
        output = read(page.markup)
        kept = found(page.prose, output)
        words = found_spaced(page.prose, output)
        code = found_spaced(page.code, output)
        frame = found(page.frame, output)
        dropped = (frame[1] - frame[0], frame[1])
        rows = rows_on_one_line(page.rows, output)
        side = "real" if page.real else "built"
        for key, value in (("prose", kept), ("words", words), ("code", code),
                           ("frame dropped", dropped), ("rows", rows)):
            totals[f"{side} {key}"] = add(totals.get(f"{side} {key}", (0, 0)), value)
        lines = line_accuracy(page, mapped) if mapped is not None else (0, 0)
        totals["lines"] = add(totals.get("lines", (0, 0)), lines)
        if page.real:
            seconds += best_time(read, page.markup, repeat)
            size += len(page.markup.encode())
        per_page.append({"page": page.name, "prose": kept, "words": words, "code": code,
                         "frame_dropped": dropped, "rows": rows, "lines": lines})
    hostile = {}
    for case, markup in HOSTILE.items():
        spent, text = hostile_time(read, markup)
        hostile[case] = {"seconds": spent, "shows_hidden": "secret" in text}
        print(f"    {name}: {case}: "
              + (f"{spent:.3f} s" if spent is not None else f"over {HOSTILE_LIMIT} s"),
              flush=True)
    return {
        "totals": {key: {"found": value[0], "of": value[1], "share": ratio(value)}
                   for key, value in totals.items()},
        "megabytes_per_second": size / 1e6 / seconds if seconds else None,
        "real_megabytes": size / 1e6,
        "hostile": hostile,
        "pages": per_page,
    }


COLUMNS = [
    ("real prose", "prose kept (real)"), ("real words", "prose word for word (real)"),
    ("real code", "code kept (real)"), ("real frame dropped", "frame dropped (real)"),
    ("real rows", "rows on a line (real)"), ("built prose", "prose kept (built)"),
    ("built frame dropped", "frame dropped (built)"), ("built rows", "rows on a line (built)"),
    ("built code", "code kept (built)"), ("lines", "right line"),
]


def table(results: dict[str, dict[str, Any]]) -> str:
    header = ["reader", *[title for _, title in COLUMNS], "MB/s",
              *[f"{case} (s)" for case in HOSTILE]]
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, result in results.items():
        cells = [name]
        for key, _ in COLUMNS:
            total = result["totals"].get(key)
            share = total["share"] if total else None
            cells.append("n/a" if share is None else f"{share:.1%}")
        cells.append(f"{result['megabytes_per_second']:.2f}")
        for case in HOSTILE:
            spent = result["hostile"][case]["seconds"]
            cells.append(f"> {HOSTILE_LIMIT}" if spent is None else f"{spent:.3f}")
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--readers", nargs="+", default=list(LOADERS), choices=list(LOADERS))
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per page (best kept)")
    parser.add_argument("--output", type=Path, default=HERE / "results" / "html_reader.json")
    args = parser.parse_args(argv)

    readers = load_readers(args.readers)
    pages = real_pages() + built_pages()
    real = [page for page in pages if page.real]
    print(f"{len(real)} real pages ({sum(len(p.markup) for p in real) / 1e6:.2f} MB: "
          f"{sum(len(p.prose) for p in real)} paragraphs, {sum(len(p.code) for p in real)} code "
          f"lines, {sum(len(p.rows) for p in real)} table rows, "
          f"{sum(len(p.frame) for p in real)} frame strings), {len(pages) - len(real)} built")
    results = {}
    for name, (read, mapped) in readers.items():
        print(f"  {name}", flush=True)
        results[name] = measure(name, read, mapped, pages, args.repeat)
    print(table(results))

    versions: dict[str, str | None] = {}
    for package in ("lxml", "trafilatura", "html-text", "inscriptis"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    output = {
        "readers": results,
        "pages": [{"page": page.name, "bytes": len(page.markup.encode()),
                   "prose": len(page.prose), "code": len(page.code), "rows": len(page.rows),
                   "frame": len(page.frame)} for page in pages],
        "versions": versions,
        "libxml2": ".".join(map(str, etree.LIBXML_VERSION)),
        "machine": {"python": platform.python_version(), "platform": platform.platform(),
                    "processor": platform.processor() or platform.machine()},
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(output, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
