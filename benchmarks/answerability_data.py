"""Training questions for the answerability reader, made from text on this machine.

    python benchmarks/answerability_data.py --recipe 1
    python benchmarks/answerability_data.py --recipe 2

None of it comes from the labeled sets or their sources (the Python language reference, the
standard library's docstrings, click's docstrings, the encyclopedic passages). Passages from:

- ``man``: the English section-1 man pages (``/usr/share/man/man1``, but the Google Cloud SDK's
  16,000 generated ones), rendered by ``man``, their DESCRIPTION and OPTIONS paragraphs, titled
  ``name(1)``;
- ``rust``: the Rust book and reference of the installed toolchain's docs (HTML paragraphs under
  their page's heading);
- ``docstrings``: the descriptions (before "Parameters") of public functions of numpy and
  networkx, titled with their qualified name.

Each passage of two sentences or more gives a question from one of its sentences, by template:
an answer span (a number, a name, a code word, or the sentence's subject or last words) is
replaced by a wh-word ("what", "what number", "which"), a few other words may be dropped, and
the document is named in half of them ("In `ls(1)`, ..."). Each question has one positive (the
passage) and near misses, none of which holds the answer span: the passage with the answering
sentence removed, a neighbouring passage of the same document (the next paragraph, a sibling
function of the same module) and the passage of another document sharing the most of the
question's words. Recipe 2 keeps fewer of the sentence's words in the question and adds the
passage with a key word of the question swapped for another (see ``make_question`` and
``build``). Everything is seeded and ordered: the same machine gives the same file.

Written to ``benchmarks/data/answerability_train_r{recipe}.jsonl`` (not committed; one question
a line with its passages and labels) and a summary of its size and sources to
``benchmarks/results/answerability_data_r{recipe}.json``.
"""

from __future__ import annotations

import argparse
import collections
import inspect
import json
import random
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from answerability_reader import key_words

from citeformer.evidence.refusal import question_words
from citeformer.evidence.scoring import content_words

HERE = Path(__file__).resolve().parent


def data_files(recipe: int) -> tuple[Path, Path]:
    """The training questions of ``recipe`` and the summary of their size and sources."""
    return (HERE / "data" / f"answerability_train_r{recipe}.jsonl",
            HERE / "results" / f"answerability_data_r{recipe}.json")


MAN_DIR = Path("/usr/share/man/man1")
RUST_DOCS = Path.home() / ".rustup" / "toolchains"
DOCSTRING_MODULES = ("numpy", "numpy.linalg", "numpy.random", "networkx")
SEED = 46
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9`\"'(-])")
_WORD = re.compile(r"\S+")
_IMPERATIVE = re.compile(r"^(Return|Returns|Compute|Computes|Create|Creates|Generate|Generates|"
                         r"Find|Finds|Test|Tests|Check|Checks|Draw|Draws|Remove|Removes|Print|"
                         r"Prints|Display|Displays|Set|Sets|Make|Makes|Convert|Converts)\b")
MIN_CHARS, MAX_CHARS = 120, 700


def sentences(text: str) -> list[str]:
    return [s.strip() for line in text.split("\n") for s in _SENTENCE_END.split(line) if s.strip()]


def man_documents(limit: int) -> list[dict[str, Any]]:
    """Paragraphs of the DESCRIPTION and OPTIONS sections of section-1 man pages."""
    # The Google Cloud SDK's 16,000 generated pages would crowd out every other command.
    names = sorted({p.name.split(".")[0] for p in MAN_DIR.iterdir()
                    if not p.name.startswith("gcloud")})
    documents = []
    for name in names:
        if len(documents) >= limit:
            break
        try:
            page = subprocess.run(
                ["man", "--nh", "--nj", "-P", "cat", "1", name], capture_output=True, text=True,
                timeout=10, env={"MANWIDTH": "10000", "LANG": "C.UTF-8", "PATH": "/usr/bin:/bin"},
            ).stdout
        except (subprocess.TimeoutExpired, OSError):
            continue
        paragraphs, section = [], None
        for block in re.split(r"\n\s*\n", page):
            lines = [line.strip() for line in block.splitlines() if line.strip()]
            if not lines:
                continue
            if re.fullmatch(r"[A-Z][A-Z ]+", lines[0]):
                section = lines[0]
                lines = lines[1:]
            if section in ("DESCRIPTION", "OPTIONS") and lines:
                paragraphs.append(" ".join(lines))
        passages = pack(paragraphs)
        if len(passages) >= 2:
            documents.append({"source": "man", "title": f"{name}(1)", "passages": passages})
    return documents


def rust_documents(limit: int) -> list[dict[str, Any]]:
    """Paragraphs of the Rust book and reference, one document a page."""
    import lxml.html

    folders = sorted(RUST_DOCS.glob("*/share/doc/rust/html"))
    if not folders:
        return []
    pages = sorted((folders[0] / "book").glob("ch*.html")) + sorted(
        (folders[0] / "reference").glob("*.html"))
    documents = []
    for page in pages[:limit]:
        tree = lxml.html.fromstring(page.read_bytes())
        main = tree.find(".//main")
        if main is None:
            continue
        # "Advanced Traits - The Rust Programming Language": the page's own name.
        head = tree.find(".//title")
        title = head.text_content().split(" - ")[0].strip() if head is not None else page.stem
        paragraphs = [" ".join(p.text_content().split()) for p in main.iter("p")]
        passages = pack([p for p in paragraphs if len(p) > 40])
        if len(passages) >= 2:
            documents.append({"source": "rust", "title": title, "passages": passages})
    return documents


def docstring_documents() -> list[dict[str, Any]]:
    """Function descriptions of third-party modules the labeled sets do not use: one document
    a module, one passage a function."""
    import importlib

    documents = []
    for module_name in DOCSTRING_MODULES:
        module = importlib.import_module(module_name)
        passages, titles = [], []
        for name in sorted(dir(module)):
            if name.startswith("_"):
                continue
            function = getattr(module, name)
            if not callable(function) or inspect.isclass(function):
                continue
            doc = inspect.getdoc(function) or ""
            description = re.split(r"\n\s*(?:Parameters|Returns|See Also|Examples|Notes)\n-{3,}",
                                   doc)[0]
            paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", description)]
            text = "\n".join(p for p in paragraphs if p and not p.startswith(name + "("))
            if MIN_CHARS <= len(text) <= MAX_CHARS and len(sentences(text)) >= 2:
                passages.append(text)
                titles.append(f"{module_name}.{name}")
        if passages:
            documents.append({"source": "docstrings", "title": module_name,
                              "passages": passages, "titles": titles})
    return documents


def pack(paragraphs: list[str]) -> list[str]:
    """Consecutive paragraphs joined into passages of MIN_CHARS to MAX_CHARS characters."""
    passages, current = [], ""
    for paragraph in paragraphs:
        if len(paragraph) > MAX_CHARS:
            paragraph = paragraph[:MAX_CHARS].rsplit(" ", 1)[0]
        if current and len(current) + len(paragraph) > MAX_CHARS:
            if len(current) >= MIN_CHARS:
                passages.append(current)
            current = ""
        current = f"{current}\n{paragraph}" if current else paragraph
    if len(current) >= MIN_CHARS:
        passages.append(current)
    return passages


def make_question(
    sentence: str, name: str, rng: random.Random, recipe: int
) -> tuple[str, str] | None:
    """A wh-question over ``sentence`` and its answer span, or None where none fits.

    Recipe 1 drops one to three of the other words from half of the questions; recipe 2 keeps
    only 40 to 70% of them in every question, as the labeled questions share about half of
    their words with the answering sentence."""
    words = _WORD.findall(sentence.rstrip(".!?:;"))
    if not 6 <= len(words) <= 40:
        return None
    imperative = _IMPERATIVE.match(sentence)
    if imperative and rng.random() < 0.5:
        verb = imperative.group(1).lower().rstrip("s") if imperative.group(1) not in (
            "Test", "Tests") else "test"
        return f"What does `{name}` {verb}?", " ".join(words[1:4])
    candidates = [i for i, w in enumerate(words) if i > 0 and (
        any(c.isdigit() for c in w) or w[0].isupper() or "_" in w or "`" in w or "()" in w)]
    if candidates and rng.random() < 0.6:
        position = rng.choice(candidates)
        answer = words[position].strip(",;:()")
        wh = "what number" if any(c.isdigit() for c in answer) else "what"
        kept = words[:position] + [wh] + words[position + 1:]
    elif rng.random() < 0.5 and len(words) > 7:
        # The subject: "X is/does ..." asked as "What is/does ...?"
        cut = rng.randint(1, min(3, len(words) - 5))
        answer = " ".join(words[:cut])
        kept = ["What"] + words[cut:]
    else:
        cut = rng.randint(1, 3)
        answer = " ".join(words[-cut:])
        kept = words[:-cut] + ["what"]
    if len(content_words(answer)) == 0:
        return None
    # Drop a few other words now and then: a question rarely repeats its answer's sentence.
    droppable = [i for i, w in enumerate(kept) if w.lower() not in ("what", "which")
                 and content_words(w) and not w[0].isupper()]
    if recipe == 1 and rng.random() < 0.5:
        dropped = min(len(droppable), rng.randint(1, 3))
    elif recipe == 2 and droppable:
        dropped = max(1, round(len(droppable) * (1 - rng.uniform(0.4, 0.7))))
    else:
        dropped = 0
    for i in sorted(rng.sample(droppable, dropped), reverse=True):
        del kept[i]
    question = " ".join(kept)
    question = question[0].upper() + question[1:]
    if rng.random() < 0.5:
        question = f"In `{name}`, {question[0].lower()}{question[1:]}"
    return question.rstrip(",;:") + "?", answer


def holds(text: str, answer: str) -> bool:
    return answer.lower() in text.lower()


def swapped(text: str, key: str, other: str) -> str:
    """``text`` with the word ``key`` (any case) written ``other`` instead."""
    return re.sub(r"(?<![\w.])" + re.escape(key) + r"(?!\w)", other, text, flags=re.IGNORECASE)


def build(
    per_source: int, seed: int, recipe: int
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    rng = random.Random(seed)
    documents = man_documents(400) + rust_documents(400) + docstring_documents()
    # Every passage, for the lexical near miss: (document index, passage index, words).
    pool = [(d, p, set(content_words(text))) for d, doc in enumerate(documents)
            for p, text in enumerate(doc["passages"])]
    index: dict[str, list[int]] = collections.defaultdict(list)
    for row, (_, _, words) in enumerate(pool):
        for word in words:
            index[word].append(row)
    by_source = collections.defaultdict(list)
    for row, (d, _, _) in enumerate(pool):
        by_source[documents[d]["source"]].append(row)
    # Names, code words and numbers to swap in for the question's key word (recipe 2).
    vocabulary = sorted({k for doc in documents for text in doc["passages"]
                         for k in key_words(text)})
    records = []
    for source, rows in sorted(by_source.items()):
        rows = rows[:]
        rng.shuffle(rows)
        made = 0
        for row in rows:
            if made >= per_source:
                break
            d, p, _ = pool[row]
            doc = documents[d]
            title = doc["titles"][p] if "titles" in doc else doc["title"]
            text = doc["passages"][p]
            parts = sentences(text)
            if len(parts) < 2:
                continue
            answering = rng.randrange(len(parts))
            made_question = make_question(parts[answering], title, rng, recipe)
            if made_question is None:
                continue
            question, answer = made_question
            words = question_words(question)
            if len(words) < 2:
                continue
            negatives = []
            rest = "\n".join(s for i, s in enumerate(parts) if i != answering)
            if not holds(rest, answer):
                negatives.append(("removed", title, rest))
            neighbours = [q for q in (p + 1, p - 1) if 0 <= q < len(doc["passages"])]
            for q in neighbours:
                other = doc["passages"][q]
                if not holds(other, answer):
                    other_title = doc["titles"][q] if "titles" in doc else doc["title"]
                    negatives.append(("neighbour", other_title, other))
                    break
            overlap = collections.Counter(r for w in sorted(words) for r in index.get(w, ()))
            for other_row, _ in overlap.most_common(20):
                od, op, _ = pool[other_row]
                if od == d:
                    continue
                other_doc = documents[od]
                other = other_doc["passages"][op]
                if not holds(other, answer):
                    other_title = (other_doc["titles"][op] if "titles" in other_doc
                                   else other_doc["title"])
                    negatives.append(("lexical", other_title, other))
                    break
            # Recipe 2: the passage naming something else than the question asks about
            # ("Adelaide is the capital of South Australia" for the capital of Australia).
            keys = [k for k in sorted(key_words(question))
                    if k not in answer.lower() and re.search(
                        r"(?<![\w.])" + re.escape(k) + r"(?!\w)", f"{title} {text}", re.I)]
            if recipe == 2 and keys:
                key = rng.choice(keys)
                other = rng.choice(vocabulary)
                while other == key or other in question.lower():
                    other = rng.choice(vocabulary)
                negatives.append(("swapped", swapped(title, key, other), swapped(text, key, other)))
            if not negatives:
                continue
            records.append({
                "id": f"{source}-{made:04d}", "source": source, "question": question,
                "answer": answer, "document": doc["title"],
                "passages": [{"kind": "answer", "title": title, "text": text, "label": 1}] + [
                    {"kind": kind, "title": t, "text": x, "label": 0}
                    for kind, t, x in negatives],
            })
            made += 1
    summary = {
        "recipe": recipe,
        "seed": seed,
        "questions": len(records),
        "pairs": sum(len(r["passages"]) for r in records),
        "by_source": {s: sum(r["source"] == s for r in records) for s in sorted(by_source)},
        "negatives": dict(collections.Counter(
            p["kind"] for r in records for p in r["passages"] if not p["label"])),
        "documents": {s: sum(doc["source"] == s for doc in documents) for s in sorted(by_source)},
        "passages_pooled": len(pool),
        "sources": {
            "man": f"{MAN_DIR}, section 1 but gcloud's pages, DESCRIPTION and OPTIONS (the "
                   "first 400 pages by name with two passages or more)",
            "rust": "the Rust book (ch*.html) and reference of " + ", ".join(
                str(f) for f in sorted(RUST_DOCS.glob("*/share/doc/rust/html"))[:1]),
            "docstrings": "function descriptions of " + ", ".join(DOCSTRING_MODULES),
        },
    }
    return records, summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-source", type=int, default=450,
                        help="questions made from each of the three sources (at most)")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--recipe", type=int, choices=(1, 2), default=2,
                        help="1: questions close to their sentence, three near misses; 2: "
                             "fewer of the sentence's words, and the key-word swap beside them")
    args = parser.parse_args()
    records, summary = build(args.per_source, args.seed, args.recipe)
    out, summary_file = data_files(args.recipe)
    out.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    summary_file.write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(summary, indent=1))
    print(f"written to {out} and {summary_file}", file=sys.stderr)


if __name__ == "__main__":
    main()
