"""Build ``paraphrase.jsonl``: questions whose gold passage says the answer in other words.

    python benchmarks/data/build_paraphrase.py          # (re)write paraphrase.jsonl beside it
    python benchmarks/data/build_paraphrase.py --check  # fail if the file differs from the build

Citation steering that finds the passage by the words it shares with the question (the lexical
evidence scorer) has an easy time on the other sets, whose gold passages repeat most of the
question's content words. Here they do not: for every question, at most ``MAX_SHARE`` of the
question's content words (``citeformer.evidence.scoring.content_words``, as the scorer counts
them) occur in its gold passages, so finding the gold passage takes reading its meaning. The set
has two halves.

Docstrings (``r01``-``r24``): what functions, methods and classes of click do, over spans of their
docstrings (click is installed with the project: huggingface_hub, which transformers needs, depends
on it). A passage is cut as in ``build_api.py`` (``build_technical.py``'s cutting and checks: spans
from a sentence or paragraph start to a sentence or paragraph end, layout flattened, no doctests,
code or square brackets, 250 to 700 characters), but it never holds the object's signature or name,
and its title is the name of the module that defines the object (every passage of a question comes
from the same module, so the title tells them apart no more than the text does). The question names
the object by module and name (``click.termui.getchar``), and no word of that name occurs in the
gold passage; for the object's own name, neither does a longer word holding a word's stem
("pausing" for ``pause``) nor two adjacent words that spell one ("progress bar" for
``progressbar``; ``named_words`` has the rule): sentences that name the object are left out of its
spans. The distractors are docstrings of sibling objects of the same module, which share the
vocabulary. Docstrings change between click versions, so the built file is committed; this script
reproduces it with click ``VERSION``; with another version a span whose words moved fails the
build, and ``--check`` reports any other difference.

Paraphrases (``r25``-``r48``): questions over the encyclopedic set's passages
(``questions.jsonl``), reused verbatim with their titles and named ``q01/p3`` (item and passage id
there). The questions are written in other words than the passage ("finished" for "completed", "How
many separate pieces" for "206 bones"); for four of them two passages answer together, as in the
encyclopedic set's multi-hop questions. These passages are short, so the length bounds are relaxed
to ``SHORT_CHARS``; every other rule holds.

Every question is checked by the technical set's rules: 3 to 6 passages with no square brackets,
one or two gold passages, a gold answer that ``citebench.metrics.contains_answer`` finds in a gold
passage and in neither a distractor nor the question, ids ``r01``, ``r02``, ... in order, and by the
share rule above, counted over the gold passages' text (for the encyclopedic half, over their
titles too, which differ between passages). The passage order is shuffled per question with a fixed
seed.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import random
import re
import sys
from dataclasses import replace
from itertools import pairwise
from pathlib import Path
from typing import Any, NamedTuple

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import build_api  # noqa: E402
import build_technical as technical  # noqa: E402

# check_passage and cut_text: the tests cut through this module as the build does.
from build_technical import Question, check_passage, cut_text, q, render  # noqa: E402, F401
from citebench.data import DATA_FILE, load_items  # noqa: E402

from citeformer.errors import InvalidInputError  # noqa: E402
from citeformer.evidence.scoring import content_words  # noqa: E402

OUTPUT = HERE / "paraphrase.jsonl"
PACKAGE, VERSION = "click", "8.5.1"
"""The docstrings' package and the version the committed file was cut from."""
MAX_SHARE = 0.34
"""The largest share of a question's content words that its gold passages may hold."""
SHORT_CHARS = (20, 250)
"""Length bounds of the encyclopedic passages (the docstring passages keep 250 to 700)."""
_WORD = re.compile(r"[^\W_]+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


class Text(NamedTuple):
    """A passage as the checks see it."""

    text: str
    title: str
    topic: str | None
    """The documented object's qualified name; None for an encyclopedic passage."""


def cut(module: str, name: str, *spans: tuple[str, str]) -> technical.Cut:
    """A passage: spans of the docstring of ``module.name``, titled by the module alone."""
    return technical.Cut(f"{module}.{name}", spans, title=module)


# ---------------------------------------------------------------- docstring passages

TERMUI, UTILS, TYPES, TESTING, CORE, FORMATTING = (
    "click.termui", "click.utils", "click.types", "click.testing", "click.core", "click.formatting")

P: dict[str, technical.Cut] = {
    # click.termui
    "getchar": cut(TERMUI, "getchar", ("Fetches a single character", "actually a terminal."),
                   ("Note that this will always read", "into the standard input."),
                   ("Note for Windows:", "special-key markers.")),
    "pause": cut(TERMUI, "pause", ("This command stops execution", "any key to continue."),
                 ("If the program is not run", "will instead do nothing."),
                 ("Defaults to", "the same as with echo.")),
    "secho": cut(TERMUI, "secho", ("This function combines", "into one call."),
                 ("All keyword arguments", "which one they go with."),
                 ("Non-string types will be converted", "call :meth:`bytes.decode` first.")),
    "confirm": cut(TERMUI, "confirm", ("If the user aborts the input", "exception."),
                   (":param text: the question to ask.", "the same as with echo.")),
    "prompt": cut(TERMUI, "prompt", ("If the user aborts the input", "exception."),
                  (":param default:", "if no input happens."),
                  (":param hide_input:", "will be hidden."),
                  (":param type:", "convert a value."),
                  ("If this value is a string", "instead of the actual value.")),
    "style": cut(TERMUI, "style", (":param fg:", "the other way round).")),
    "launch": cut(TERMUI, "launch", ("This function launches", "indicates success.")),
    "edit": cut(TERMUI, "edit", ("Edits the given text", "are ignored.")),
    "progressbar": cut(TERMUI, "progressbar", ("This function creates an iterable",
                                               "if the file is not a terminal.")),
    "echo_via_pager": cut(TERMUI, "echo_via_pager", ("This function takes a text",
                                                     "pager on stdout."),
                          (":param text_or_generator:", "The default is autodetection.")),
    # click.utils
    "echo": cut(UTILS, "echo", ("Print a message and newline", "files, and environments."),
                ("Compared to :func:`print`", "does the following:"),
                ("- Ensures that the output", "- Always flushes the output.")),
    "echo-params": cut(UTILS, "echo", (":param message:", "and other styles.")),
    "format_filename": cut(UTILS, "format_filename",
                           ("Invalid bytes or surrogate escapes", "``en_GB.UTF-8``."),
                           ("Many scenarios *are* safe", "including:"),
                           ("- Writing to ``stderr``", "``-X utf8``.")),
    "open_file": cut(UTILS, "open_file", ("Open a file, with extra", "param type."),
                     ("If ``'-'`` is given", "a standard stream:")),
    "get_app_dir": cut(UTILS, "get_app_dir", ("Returns the config folder",
                                              "for the operating system."),
                       (":param app_name:", "application support folder.")),
    # click.types
    "Path": cut(TYPES, "Path", (":param exists:", "an executable check is performed."),
                ("A ``~`` is not expanded", "by the shell only."),
                (":param allow_dash:", "(but does not open it)."),
                ("If ``None``, keep Python's default", "which is ``str``.")),
    "File": cut(TYPES, "File", ("Declares a parameter to be a file", "a specific encoding.")),
    "File-lazy": cut(TYPES, "File", ("The `lazy` flag controls", "until it is needed.")),
    "DateTime": cut(TYPES, "DateTime", ("The DateTime type converts", "is used.")),
    "IntRange": cut(TYPES, "IntRange", ("Restrict an :data:`click.INT` value",
                                        "instead of failing.")),
    "FloatRange": cut(TYPES, "FloatRange", ("Restrict a :data:`click.FLOAT` value",
                                            "marked ``open``.")),
    "Choice": cut(TYPES, "Choice", ("The choice type allows", "Defaults to true.")),
    # click.testing
    "CliRunner": cut(TESTING, "CliRunner", (":param charset:", "echo the input."),
                     (":param capture:", "capture strategy."),
                     ("``fd`` redirects file descriptors", "not supported on Windows.")),
    "CliRunner.invoke": cut(TESTING, "CliRunner.invoke",
                            ("It may be given as an iterable", ":func:`shlex.split`."),
                            (":param input:", "than ``SystemExit``."),
                            (":param extra:", "override this explicitly.")),
    "CliRunner.isolation": cut(TESTING, "CliRunner.isolation",
                               ("A context manager that sets up", "the prompt functionality)."),
                               (":param input:", "override this explicitly.")),
    "CliRunner.isolated_filesystem": cut(TESTING, "CliRunner.isolated_filesystem",
                                         ("A context manager that creates",
                                          "working directory to it."),
                                         ("Parallelize tests with processes", "not threads."),
                                         (":param temp_dir:", "not removed when exiting.")),
    "Result": cut(TESTING, "Result", (":param stderr_bytes:", "traceback type).")),
    # click.core
    "Command.main": cut(CORE, "Command.main",
                        ("This will always terminate", "needs to be caught."),
                        (":param complete_var:", "invoke the script in standalone mode."),
                        ("If this is set to `False`", "return value of :meth:`invoke`."),
                        (":param extra:", "for more information.")),
    "Context.scope": cut(CORE, "Context.scope",
                         ("The default behavior of this is", "closing file handles."),
                         (":param cleanup:", "The default is to run these functions."),
                         ("Nested pushes", "defer the cleanup.")),
    "Context": cut(CORE, "Context", (":param obj:", "which are always read."),
                   (":param allow_interspersed_args:", "inherit from the command."),
                   (":param token_normalize_func:", "case insensitive behavior.")),
    "Option-prompt": cut(CORE, "Option", (":param show_envvar:", "are not shown."),
                         (":param prompt:", "prompted for input."),
                         (":param confirmation_prompt:", "customize the message."),
                         (":param hide_input:", "useful for password input.")),
    "Option-flags": cut(CORE, "Option", (":param flag_value:", "if it's enabled."),
                        (":param multiple:", "arbitrary number of arguments."),
                        (":param allow_from_autoenv:", ":param help: the help string.")),
    "Parameter-basics": cut(CORE, "Parameter", (":param required:", "after type conversion."),
                            ("It is called as", "including prompts."),
                            (":param nargs:", "the arity of the tuple).")),
    "Parameter-eager": cut(CORE, "Parameter", (":param is_eager:", "order of processing."),
                           (":param shell_complete:", "completion if given."),
                           (":param deprecated:", "string as the value."),
                           (":param help: the help string.", "if appropriate.")),
    "Group": cut(CORE, "Group", (":param commands: Map names", "as the keys."),
                 (":param subcommand_metavar:", "is set or not."),
                 (":param chain:", "and so on."),
                 ("The value returned by the subcommand", "returned by all the commands."),
                 (":param kwargs:", "to :class:`Command`.")),
    # click.formatting
    "HelpFormatter": cut(FORMATTING, "HelpFormatter",
                         ("It's usually just needed", "their own fancy outputs."),
                         ("At present, it always writes into memory.", "into memory."),
                         (":param indent_increment:", "a maximum of 78.")),
    "wrap_text": cut(FORMATTING, "wrap_text", ("If paragraphs are handled", "in that block."),
                     (":param initial_indent:", "each consecutive line.")),
    "HelpFormatter.write_dl": cut(FORMATTING, "HelpFormatter.write_dl",
                                  ("Writes a definition list", "usually formatted."),
                                  (":param rows:", "second column.")),
}


# ---------------------------------------------------------------- questions

QUESTIONS: list[Question] = [
    # docstrings: the gold passage never names the object the question asks about
    q("r01", "What does `click.termui.getchar` do?",
      "single character", ["getchar"], ["pause", "prompt", "confirm", "launch"]),
    q("r02", "What does `click.termui.pause` do when no tty is attached?",
      "nothing", ["pause"], ["getchar", "edit", "launch", "progressbar"]),
    q("r03", "Which kind of data does `click.termui.secho` hand over without colouring it?",
      "bytes", ["secho"], ["style", "echo_via_pager", "progressbar", "launch"]),
    q("r04", "What does `click.termui.confirm` keep doing while no default is set and the reply "
             "is blank?", "repeat",
      ["confirm"], ["prompt", "pause", "getchar"]),
    q("r05", "Which argument of `click.termui.prompt` swaps in your own converter for the "
             "type-based one?", "value_proc",
      ["prompt"], ["confirm", "getchar", "pause", "style"]),
    q("r06", "Which text effect does `click.termui.style` admit is poorly handled?",
      "dim", ["style"], ["secho", "progressbar", "echo_via_pager", "launch"]),
    q("r07", "On which OS does `click.utils.echo` fix a badly set-up character set for stdout?",
      "Linux", ["echo"], ["format_filename", "open_file", "get_app_dir"]),
    q("r08", "What does `click.utils.echo` do to the stream after every write?",
      "flushes", ["echo"], ["echo-params", "format_filename", "open_file"]),
    q("r09", "Which error handler protects the diagnostics stream, per "
             "`click.utils.format_filename`?", "backslashreplace",
      ["format_filename"], ["echo", "open_file", "get_app_dir"]),
    q("r10", "Who is expected to expand `~` for a `click.types.Path` value?",
      "shell", ["Path"], ["File", "DateTime", "Choice", "IntRange"]),
    q("r11", "What becomes of the remaining checks of `click.types.Path` when existence is "
             "optional and the target is absent?", "silently skipped",
      ["Path"], ["File", "File-lazy", "FloatRange"]),
    q("r12", "Which mode of `click.testing.CliRunner` swaps the OS-level handles 1 and 2 for a "
             "temp file?", "fd",
      ["CliRunner"], ["CliRunner.invoke", "CliRunner.isolation", "Result"]),
    q("r13", "On which platform is descriptor-level capturing of `click.testing.CliRunner` "
             "unavailable?", "Windows",
      ["CliRunner"], ["CliRunner.invoke", "CliRunner.isolation",
                      "CliRunner.isolated_filesystem", "Result"]),
    q("r14", "How does `click.testing.CliRunner.invoke` read args handed over as one string?",
      "Unix shell command", ["CliRunner.invoke"], ["CliRunner", "CliRunner.isolation", "Result"]),
    q("r15", "Which field of `click.testing.Result` holds the merged console stream exactly as "
             "displayed?", "output_bytes",
      ["Result"], ["CliRunner", "CliRunner.invoke", "CliRunner.isolation"]),
    q("r16", "What does `click.testing.CliRunner.isolated_filesystem` switch the CWD to?",
      "temporary directory", ["CliRunner.isolated_filesystem"],
      ["CliRunner", "CliRunner.isolation", "Result"]),
    q("r17", "What exception must a caller catch to keep `click.core.Command.main` from ending "
             "the process?", "SystemExit",
      ["Command.main"], ["Context.scope", "Group", "Parameter-eager", "Option-flags"]),
    q("r18", "What happens to cleanup when `click.core.Context.scope` calls are nested?",
      "defer", ["Context.scope"], ["Command.main", "Context", "Group"]),
    q("r19", "For what kind of secret is masking the typed text in `click.core.Option` meant?",
      "password", ["Option-prompt"], ["Parameter-eager", "Context", "Group"]),
    q("r20", "Which flag of `click.core.Option` reveals an env var on the help screen?",
      "show_envvar", ["Option-prompt"], ["Option-flags", "Parameter-eager", "Context"]),
    q("r21", "What does a `click.core.Parameter` that takes several values per use give back?",
      "tuple", ["Parameter-basics"], ["Parameter-eager", "Option-flags", "Group"]),
    q("r22", "What does `click.core.Group` pass to its result callback when chaining is on?",
      "list of values", ["Group"], ["Command.main", "Context", "Parameter-basics"]),
    q("r23", "What is the widest `click.formatting.HelpFormatter` will go by default?",
      "78", ["HelpFormatter"], ["wrap_text", "HelpFormatter.write_dl"]),
    q("r24", "Where does `click.formatting.HelpFormatter` put what it produces?",
      "memory", ["HelpFormatter"], ["wrap_text", "HelpFormatter.write_dl"]),
    # paraphrases of the encyclopedic set: the same passages, the question in other words
    q("r25", "When was Gustave Eiffel's wrought-iron landmark finished?",
      "1889", ["q01/p3"], ["q01/p1", "q01/p2", "q01/p4", "q01/p5"]),
    q("r26", "Which Australian seat of government was designed from scratch as a middle ground "
             "between the country's two largest cities?", "Canberra",
      ["q02/p4"], ["q02/p1", "q02/p5", "q02/p2", "q02/p8"]),
    q("r27", "On the Fahrenheit scale, how hot must it get for H2O to bubble away by the "
             "seaside?", "212",
      ["q03/p3"], ["q03/p1", "q03/p2", "q03/p4"]),
    q("r28", "How many separate pieces make up a grown person's frame?",
      "206", ["q05/p5"], ["q05/p1", "q05/p2", "q05/p3", "q05/p4"]),
    q("r29", "Which gas does greenery absorb from the atmosphere to build sugar with the help of "
             "sunshine?", "carbon dioxide",
      ["q07/p1"], ["q07/p2", "q07/p3", "q07/p4"]),
    q("r30", "What do we call the metal with 26 protons in each nucleus?",
      "iron", ["q08/p3"], ["q08/p1", "q08/p2", "q08/p4"]),
    q("r31", "Which waterway moves a greater volume than any other on the planet?",
      "Amazon", ["q09/p2"], ["q09/p1", "q09/p3", "q09/p4", "q09/p5"]),
    q("r32", "In what year did Armstrong set foot on our natural satellite?",
      "1969", ["q10/p4"], ["q10/p1", "q10/p2", "q10/p3"]),
    q("r33", "Which gem scores the top mark on the scratch-resistance ladder?",
      "diamond", ["q12/p3"], ["q12/p1", "q12/p2", "q12/p4"]),
    q("r34", "How long does a match in North America's top pro basketball league run?",
      "48", ["q15/p3"], ["q15/p1", "q15/p2", "q15/p4"]),
    q("r35", "Which gland houses the beta cells that bring glucose levels down?",
      "pancreas", ["q18/p4"], ["q18/p1", "q18/p2", "q18/p3"]),
    q("r36", "Who explained gravitation as a bending of space and time in 1915?",
      "Einstein", ["q19/p2"], ["q19/p1", "q19/p3", "q19/p4"]),
    q("r37", "Which summit reaches farther above the oceans than any other?",
      "Everest", ["q20/p1"], ["q20/p6", "q20/p5", "q20/p7", "q20/p4", "q20/p3"]),
    q("r38", "Which tongue is learned from birth by the greatest number of people?",
      "Mandarin", ["q21/p2"], ["q21/p1", "q21/p3", "q21/p4"]),
    q("r39", "Which neighbour of Earth owes its rusty hue to the minerals on its surface?",
      "Mars", ["q22/p3"], ["q22/p1", "q22/p2", "q22/p4"]),
    q("r40", "In which country did the father of the telephone enter the world?",
      "Scotland", ["q24/p2", "q24/p4"], ["q24/p1", "q24/p3", "q24/p5"]),
    q("r41", "Which sovereign state covers less land than any other?",
      "Vatican", ["q29/p3"], ["q29/p1", "q29/p2", "q29/p4", "q29/p5"]),
    q("r42", "How long is our planet's trip around its star, in days?",
      "365", ["q30/p3"], ["q30/p1", "q30/p2", "q30/p4"]),
    q("r43", "How many ebony notes does a concert grand's keyboard carry?",
      "36", ["q32/p3"], ["q32/p1", "q32/p2"]),
    q("r44", "Which city is the political centre of the land that contains the Taj Mahal?",
      "Delhi", ["q34/p2", "q34/p5"], ["q34/p1", "q34/p3", "q34/p4"]),
    q("r45", "What do people speak in the nation that moved its seat of government in 1960?",
      "Portuguese", ["q35/p1", "q35/p3"], ["q35/p2", "q35/p4", "q35/p5"]),
    q("r46", "Which element forms the bulk of the air we breathe?",
      "nitrogen", ["q41/p4"], ["q41/p1", "q41/p2", "q41/p3"]),
    q("r47", "Which stream passes through the biggest Egyptian city?",
      "Nile", ["q42/p3", "q42/p4"], ["q42/p1", "q42/p2", "q42/p5"]),
    q("r48", "Which naturalist proposed that living things change over generations through "
             "survival of the fittest?", "Darwin",
      ["q43/p1"], ["q43/p2", "q43/p3", "q43/p4"]),
]


# ---------------------------------------------------------------- texts and checks


def encyclopedic_texts(path: Path = DATA_FILE) -> dict[str, Text]:
    """Every passage of the encyclopedic set, named ``q01/p3`` (item id / passage id)."""
    return {f"{item.id}/{p.id}": Text(p.text, p.title, None)
            for item in load_items(path) for p in item.passages}


def docstring_texts(docs: dict[str, str]) -> dict[str, Text]:
    """The docstring passages of ``P``, cut from ``docs`` and checked."""
    texts = {}
    for name, passage in P.items():
        text, title = cut_text(name, passage, docs)
        check_passage(name, text, docs[passage.topic])
        texts[name] = Text(text, title, passage.topic)
    return texts


def overlap(question: str, golds: list[str]) -> float:
    """The share of the question's distinct content words that occur in some of ``golds``."""
    asked = set(content_words(question))
    held = {word for gold in golds for word in content_words(gold)}
    return len(asked & held) / len(asked) if asked else 0.0


def gold_words(text: Text) -> str:
    """What the share rule counts of a gold passage: its text, and the title where titles differ."""
    return text.text if text.topic else f"{text.title} {text.text}"


def named_words(name: str, module: str, text: str) -> list[str]:
    """The words of ``text`` that repeat a word of the dotted ``name`` (defined in ``module``).

    Names are split into words at dots, underscores and lower-to-upper case changes
    (``CliRunner``: cli, runner). A word of the module's name counts as it is; a word of the
    object's own name also counts when a longer word holds its stem (the word less its last two
    letters, at least four letters: "pausing" for ``pause``, "launches" for ``launch``; a word
    shorter than four letters, when a word starts with it) or when two adjacent words of the
    text spell it ("progress bar" for ``progressbar``).
    """
    def words(dotted: str) -> set[str]:
        return set(content_words(_CAMEL.sub(" ", dotted)))

    module_words = words(module)
    own = words(name.removeprefix(module)) - module_words
    stems = [w[:max(4, len(w) - 2)] for w in own]
    found = []
    for word in dict.fromkeys(content_words(text)):
        if word in module_words or any(
                stem in word if len(stem) >= 4 else word.startswith(stem) for stem in stems):
            found.append(word)
    raw = [w.lower() for w in _WORD.findall(text)]
    found += [f"{a} {b}" for a, b in pairwise(raw) if len(a + b) >= 6 and a + b in own]
    return found


def check_question(question: Question, number: int, texts: dict[str, Text]) -> None:
    """Refuse a question that breaks a rule of the set (see the module docstring)."""
    where = f"question {question.id}"
    if question.id != f"r{number:02d}":
        raise InvalidInputError(f"{where} is number {number}; number the questions r01, r02, "
                                "... in order")
    # The technical set's rules apply as they are, but they expect its ids (t01, ...): check the
    # question under that id and give its own id back in the message.
    stand_in = f"t{number:02d}"
    names = (*question.gold, *question.distractors)
    pairs = {n: (texts[n].text, texts[n].title) for n in names if n in texts}
    try:
        technical.check_question(replace(question, id=stand_in), number, pairs)
    except InvalidInputError as error:
        message = str(error).replace(f"question {stand_in}", where, 1)
        raise InvalidInputError(message) from None
    halves = {texts[n].topic is None for n in names}
    if len(halves) > 1:
        raise InvalidInputError(f"{where} mixes docstring and encyclopedic passages; take all "
                                "passages of a question from one half")
    golds = [texts[n] for n in question.gold]
    share = overlap(question.question, [gold_words(t) for t in golds])
    if share > MAX_SHARE:
        raise InvalidInputError(f"{where}: its gold passages hold {share:.0%} of its content "
                                f"words (at most {MAX_SHARE:.0%}); say it in other words")
    for gold in golds:
        if gold.topic is None:
            continue
        if f"`{gold.topic}`" not in question.question:
            raise InvalidInputError(f"{where} does not name `{gold.topic}`, whose docstring "
                                    "answers it; name the object by module and name")
        repeated = named_words(gold.topic, gold.title, gold.text)
        if repeated:
            raise InvalidInputError(f"{where}: its gold passage repeats {repeated} of the name "
                                    f"{gold.topic!r}; cut the sentences holding them")


def check_short_passage(name: str, text: str) -> None:
    """Refuse an encyclopedic passage of the wrong length or with a square bracket."""
    low, high = SHORT_CHARS
    if not low <= len(text) <= high:
        raise InvalidInputError(f"passage {name!r} has {len(text)} characters; use one of "
                                f"{low}-{high}")
    if "[" in text or "]" in text:
        raise InvalidInputError(f"passage {name!r} holds a square bracket; choose another")


# ---------------------------------------------------------------- the set


def build(docs: dict[str, str], encyclopedic: dict[str, Text]) -> list[dict[str, Any]]:
    """The rows of ``paraphrase.jsonl``, checked; ``docs`` maps qualified names to docstrings,
    ``encyclopedic`` is ``encyclopedic_texts()``."""
    missing = sorted({passage.topic for passage in P.values()} - set(docs))
    if missing:
        raise InvalidInputError(f"no docstring given for {missing}; pass docstrings() of every "
                                "object the passages name")
    texts = {**encyclopedic, **docstring_texts(docs)}
    rows = []
    for number, question in enumerate(QUESTIONS, 1):
        for name in (*question.gold, *question.distractors):
            if name in encyclopedic:
                check_short_passage(name, encyclopedic[name].text)
        check_question(question, number, texts)
        names = [*question.gold, *question.distractors]
        random.Random(question.id).shuffle(names)
        rows.append({
            "id": question.id,
            "question": question.question,
            "passages": [{"id": f"p{k}", "title": texts[n].title, "text": texts[n].text}
                         for k, n in enumerate(names, 1)],
            "gold_passages": [f"p{k}" for k, n in enumerate(names, 1) if n in question.gold],
            "answer": question.answer,
        })
    return rows


def docstrings() -> dict[str, str]:
    """The docstrings of every object the passages name, from the installed package."""
    return build_api.docstrings({passage.topic for passage in P.values()})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="compare with the committed file instead of writing it")
    args = parser.parse_args(argv)
    installed = importlib.metadata.version(PACKAGE)
    if installed != VERSION:
        print(f"note: {PACKAGE} {installed} is installed; the file was cut from {VERSION}")
    text = render(build(docstrings(), encyclopedic_texts()))
    if args.check:
        same = OUTPUT.is_file() and OUTPUT.read_text(encoding="utf-8") == text
        print(f"{OUTPUT.name}: {'up to date' if same else 'differs from the build'}")
        return 0 if same else 1
    OUTPUT.write_text(text, encoding="utf-8")
    print(f"wrote {len(QUESTIONS)} questions to {OUTPUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
