"""Build ``api.jsonl``: questions on what standard-library functions do, over their docstrings.

    python benchmarks/data/build_api.py           # (re)write api.jsonl beside this file
    python benchmarks/data/build_api.py --check   # fail if the file differs from the build

The passages are cut from ``inspect.getdoc()`` of standard-library functions, methods and classes
(mostly pure-Python modules: textwrap, functools, shutil, json, re, tempfile, queue, threading,
urllib.parse, base64, subprocess, difflib, statistics, zipfile, random) by the table below: each
passage names an object by its qualified name, which is also the passage's title, and the first
and last words of one or more spans of its docstring. Spans are cut as in ``build_technical.py``
(whose code does the cutting and checking): a span starts at a paragraph or sentence start and
ends at a sentence or paragraph end, and the layout is flattened (lines joined, runs of white
space made one space). Spans skip doctests (``>>>`` lines and their output), indented code, tables
and anything with square brackets, such as signatures with optional arguments. Docstrings change
between Python versions, so the built file is committed; this script reproduces it on the Python
it was built with (3.11; the file was built on 3.11.7). Elsewhere a span whose words moved fails
the build, and ``--check`` reports any other difference.

Every question is checked by the technical set's rules: 3 to 6 passages of 250 to 700 characters
with no square brackets, verbatim up to layout; one or two gold passages; a gold answer that
``citebench.metrics.contains_answer`` finds in a gold passage and in neither a distractor nor the
question; ids ``a01``, ``a02``, ... in order. The distractors are docstrings of sibling functions
of the same module or of similarly named functions, so finding the gold passage takes reading.
The passage order is shuffled per question with a fixed seed.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import build_technical as technical  # noqa: E402

# check_passage and cut_text: the tests cut through this module as the build does.
from build_technical import Question, check_passage, cut_text, q, render  # noqa: E402, F401

from citeformer.errors import InvalidInputError  # noqa: E402

OUTPUT = HERE / "api.jsonl"


def cut(obj: str, *spans: tuple[str, str]) -> technical.Cut:
    """A passage: spans of the docstring of ``obj`` (a qualified name), titled by that name."""
    return technical.Cut(obj, spans, title=obj)


# ---------------------------------------------------------------- passages

P: dict[str, technical.Cut] = {
    # textwrap
    "textwrap.wrap": cut("textwrap.wrap", ("Wrap a single paragraph", "customize wrapping "
                                                                      "behaviour.")),
    "textwrap.fill": cut("textwrap.fill", ("Fill a single paragraph", "customize wrapping "
                                                                      "behaviour.")),
    "textwrap.dedent": cut("textwrap.dedent", ("Remove any common leading whitespace",
                                               "normalized to a newline character.")),
    "textwrap.indent": cut("textwrap.indent", ("Adds 'prefix'",
                                               "consist solely of whitespace characters.")),
    # functools
    "functools.lru_cache": cut("functools.lru_cache", ("Least-recently-used cache decorator.",
                                                       "with f.__wrapped__.")),
    "functools.update_wrapper": cut("functools.update_wrapper",
                                    ("Update a wrapper function",
                                     "(defaults to functools.WRAPPER_UPDATES)")),
    "functools.wraps": cut("functools.wraps", ("Decorator factory",
                                               "applying partial() to update_wrapper().")),
    "functools.singledispatch": cut("functools.singledispatch",
                                    ("Single-dispatch generic function decorator.",
                                     "attribute of the generic function.")),
    "functools.reduce": cut("functools.reduce", ("Apply a function of two arguments",
                                                 "to a single value."),
                            ("If initial is present", "when the iterable is empty.")),
    # shutil
    "shutil.copy": cut("shutil.copy", ("Copy data and mode bits", "will be raised.")),
    "shutil.copy2": cut("shutil.copy2", ("Copy data and metadata.", 'GNU\'s "cp -P src dst".')),
    "shutil.copystat": cut("shutil.copystat", ("Copy file metadata",
                                               "both `src` and `dst` are symlinks.")),
    "shutil.copytree-symlinks": cut("shutil.copytree", ("If the optional symlinks flag",
                                                        "don't support os.symlink.")),
    "shutil.copytree-ignore": cut("shutil.copytree", ("The optional ignore argument",
                                                      "as returned by os.listdir():"),
                                  ("Since copytree() is called recursively",
                                   "should not be copied.")),
    "shutil.copytree-copy": cut("shutil.copytree", ("The optional copy_function argument",
                                                    "from the `src` tree.")),
    "shutil.rmtree": cut("shutil.rmtree", ("Recursively delete a directory tree.",
                                           "an exception is raised.")),
    "shutil.move": cut("shutil.move", ("Recursively move a file", "cross filesystem renames.")),
    "shutil.make_archive": cut("shutil.make_archive", ("Create an archive file",
                                                       "Returns the name of the archive file.")),
    "shutil.unpack_archive": cut("shutil.unpack_archive", ("Unpack an archive.",
                                                           "extraction function.")),
    "shutil.which": cut("shutil.which", ("Given a command", "with a custom search path.")),
    "shutil.get_terminal_size": cut("shutil.get_terminal_size",
                                    ("For each of the two dimensions",
                                     "of type os.terminal_size.")),
    "shutil.register_unpack_format": cut("shutil.register_unpack_format",
                                         ("Registers an unpack format.",
                                          "by the get_unpack_formats() function.")),
    # json
    "json.dumps-ascii": cut("json.dumps", ("If ``ensure_ascii`` is false",
                                           "(``NaN``, ``Infinity``, ``-Infinity``).")),
    "json.dumps-indent": cut("json.dumps", ("If ``indent`` is a non-negative integer",
                                            "to eliminate whitespace.")),
    "json.dumps-default": cut("json.dumps", ("``default(obj)`` is a function",
                                             "otherwise ``JSONEncoder`` is used.")),
    "json.loads-hooks": cut("json.loads", ("``object_hook`` is an optional function",
                                           "takes priority.")),
    "json.loads-parse": cut("json.loads", ("``parse_float``, if specified",
                                           "are encountered.")),
    # re
    "re.findall": cut("re.findall", ("Return a list of all", "included in the result.")),
    "re.split": cut("re.split", ("Split the source string", "final element of the list.")),
    "re.sub": cut("re.sub", ("Return the string obtained", "a replacement string to be used.")),
    "re.subn": cut("re.subn", ("Return a 2-tuple", "a replacement string to be used.")),
    # tempfile
    "tempfile.NamedTemporaryFile": cut("tempfile.NamedTemporaryFile",
                                       ("Returns an object with a file-like interface;",
                                        "even in this case.")),
    "tempfile.TemporaryFile": cut("tempfile.TemporaryFile", ("Create and return a temporary",
                                                             "when it is closed.")),
    "tempfile.mkstemp-name": cut("tempfile.mkstemp", ("User-callable function",
                                                      "opened in binary mode.")),
    "tempfile.mkstemp-safety": cut("tempfile.mkstemp", ("If any of 'suffix'",
                                                        "when done with it.")),
    "tempfile.mkdtemp": cut("tempfile.mkdtemp", ("User-callable function",
                                                 "when done with it.")),
    "tempfile.mktemp": cut("tempfile.mktemp", ("User-callable function", "beaten you to the "
                                                                         "punch.")),
    # queue
    "queue.Queue.get": cut("queue.Queue.get", ("Remove and return an item", "in that case).")),
    "queue.Queue.put": cut("queue.Queue.put", ("Put an item into the queue.", "in that case).")),
    "queue.Queue.join": cut("queue.Queue.join", ("Blocks until all items", "join() unblocks.")),
    "queue.Queue.task_done": cut("queue.Queue.task_done", ("Indicate that a formerly enqueued",
                                                           "placed in the queue.")),
    "queue.Queue.empty": cut("queue.Queue.empty", ("Return True if the queue is empty",
                                                   "to use the join() method.")),
    "queue.Queue.full": cut("queue.Queue.full", ("Return True if the queue is full",
                                                 "qsize() can be used.")),
    # threading
    "threading.Thread.join": cut("threading.Thread.join",
                                 ("When the timeout argument is present", "the join() call "
                                                                          "timed out."),
                                 ("A thread can be join()ed", "raises the same exception.")),
    "threading.Thread.daemon": cut("threading.Thread.daemon", ("A boolean value",
                                                               "only daemon threads are left.")),
    "threading.Thread.start": cut("threading.Thread.start", ("Start the thread's activity.",
                                                             "on the same thread object.")),
    "threading.Event.wait": cut("threading.Event.wait", ("Block until the internal flag",
                                                         "the operation times out.")),
    "threading.Condition.wait": cut("threading.Condition.wait", ("Wait until notified",
                                                                 "re-acquires the lock and "
                                                                 "returns.")),
    "threading.Semaphore.acquire": cut("threading.Semaphore.acquire",
                                       ("When invoked with blocking set to true",
                                        "Return true otherwise.")),
    "threading.BoundedSemaphore": cut("threading.BoundedSemaphore",
                                      ("Implements a bounded semaphore.",
                                       "guard resources with limited capacity."),
                                      ("If the semaphore is released too many times",
                                       "value defaults to 1.")),
    "threading.RLock": cut("threading.RLock", ("Factory function", "each time it has "
                                                                   "acquired it.")),
    "threading.Barrier.wait": cut("threading.Barrier.wait", ("Wait for the barrier.",
                                                             "from 0 to 'parties-1'.")),
    # urllib.parse
    "urllib.parse.parse_qs": cut("urllib.parse.parse_qs", ("strict_parsing:",
                                                           "Returns a dictionary.")),
    "urllib.parse.parse_qsl": cut("urllib.parse.parse_qsl", ("strict_parsing:",
                                                             "as G-d intended.")),
    "urllib.parse.quote": cut("urllib.parse.quote", ("Each of the reserved characters",
                                                     "the set of unreserved characters.")),
    "urllib.parse.unquote": cut("urllib.parse.unquote", ("Replace %xx escapes",
                                                         "by a placeholder character.")),
    "urllib.parse.urlencode": cut("urllib.parse.urlencode", ("Encode a dict",
                                                             "if a component is a str).")),
    "urllib.parse.urlparse": cut("urllib.parse.urlparse", ("Parse a URL",
                                                           "% escapes are not expanded.")),
    "urllib.parse.urlsplit": cut("urllib.parse.urlsplit", ("Parse a URL",
                                                           "% escapes are not expanded.")),
    # base64
    "base64.b64decode": cut("base64.b64decode", ("Decode the Base64",
                                                 "input result in a binascii.Error.")),
    "base64.b64encode": cut("base64.b64encode", ("Encode the bytes-like object",
                                                 "filesystem safe Base64 strings.")),
    "base64.b32decode": cut("base64.b32decode", ("Optional casefold",
                                                 "not allowed in the input.")),
    "base64.b16decode": cut("base64.b16decode", ("Decode the Base16", "present in the input.")),
    "base64.urlsafe_b64decode": cut("base64.urlsafe_b64decode", ("Decode bytes using",
                                                                 "'_' instead of '/'.")),
    "base64.a85encode": cut("base64.a85encode", ("Encode bytes-like object b",
                                                 "used by the Adobe implementation.")),
    "base64.a85decode": cut("base64.a85decode", ("Decode the Ascii85",
                                                 "returned as a bytes object.")),
    # subprocess
    "subprocess.run-capture": cut("subprocess.run", ("Run command with arguments",
                                                     "exception will be raised.")),
    "subprocess.run-input": cut("subprocess.run", ("There is an optional argument",
                                                   "same as for the Popen constructor.")),
    "subprocess.check_output": cut("subprocess.check_output",
                                   ("Run command with arguments", "in the output attribute."),
                                   ("The stdout argument is not allowed",
                                    "use stderr=STDOUT.")),
    "subprocess.CompletedProcess": cut("subprocess.CompletedProcess",
                                       ("A process that has finished running.",
                                        "The standard error (None if not captured).")),
    "subprocess.getstatusoutput": cut("subprocess.getstatusoutput",
                                      ("Return (exitcode, output)",
                                       "the rules for the function 'wait'.")),
    "subprocess.Popen.communicate": cut("subprocess.Popen.communicate",
                                        ('The optional "input" argument',
                                         "universal_newlines.")),
    # difflib
    "difflib.unified_diff": cut("difflib.unified_diff", ("Compare two sequences of lines",
                                                         "defaults to three."),
                                ("The unidiff format", "the ISO 8601 format.")),
    "difflib.context_diff": cut("difflib.context_diff", ("Compare two sequences of lines",
                                                         "defaults to three."),
                                ("The context diff format", "default to blanks.")),
    "difflib.get_close_matches": cut("difflib.get_close_matches",
                                     ("Use SequenceMatcher", "n must be > 0."),
                                     ("The best (no more than n)", "most similar first.")),
    "difflib.ndiff": cut("difflib.ndiff", ("Compare `a` and `b`",
                                           "include newline in this!).")),
    "difflib.SequenceMatcher.ratio": cut("difflib.SequenceMatcher.ratio",
                                         ("Where T is the total", "to get an upper bound.")),
    # statistics
    "statistics.variance": cut("statistics.variance", ("Return the sample variance",
                                                       "see ``pvariance``.")),
    "statistics.pvariance": cut("statistics.pvariance", ("Return the population variance",
                                                         "usually a better choice.")),
    "statistics.quantiles": cut("statistics.quantiles", ("Divide *data*",
                                                         "the 100th percentile.")),
    "statistics.harmonic_mean": cut("statistics.harmonic_mean",
                                    ("Return the harmonic mean", "for example speeds."),
                                    ("If ``data`` is empty", "raise ``StatisticsError``.")),
    # zipfile
    "zipfile.ZipFile-args": cut("zipfile.ZipFile", ("file: Either the path",
                                                    "would be necessary.")),
    "zipfile.ZipFile-level": cut("zipfile.ZipFile", ("compresslevel:",
                                                     "1 through 9 are accepted.")),
    "zipfile.ZipFile.open": cut("zipfile.ZipFile.open", ("Return file-like object",
                                                         "with zinfo.file_size set.")),
    # random
    "random.seed": cut("random.seed", ("Initialize internal state",
                                       "a narrower range of seeds.")),
    "random.sample": cut("random.sample", ("Chooses k unique", "selection in the sample.")),
    "random.Random": cut("random.Random", ("Random number generator base class",
                                           "arbitrarily large ranges.")),
    "random.expovariate": cut("random.expovariate", ("Exponential distribution.",
                                                     "if lambd is negative.")),
}

QUESTIONS: tuple[Question, ...] = (
    q("a01", "What does `textwrap.dedent` turn entirely blank lines into?",
      "newline character", ["textwrap.dedent"],
      ["textwrap.wrap", "textwrap.fill", "textwrap.indent"]),
    q("a02", "Which function does `textwrap.wrap` use to expand tabs by default?",
      "expandtabs", ["textwrap.wrap"], ["textwrap.fill", "textwrap.dedent", "textwrap.indent"]),
    q("a03", "By default, which lines does `textwrap.indent` add the prefix to?",
      "non-empty lines", ["textwrap.indent"],
      ["textwrap.dedent", "textwrap.wrap", "textwrap.fill"]),
    q("a04", "What does `textwrap.fill` return?",
      "new string", ["textwrap.fill"], ["textwrap.wrap", "textwrap.dedent", "textwrap.indent"]),
    q("a05", "What happens to the cache of `functools.lru_cache` when `maxsize` is None?",
      "grow without bound", ["functools.lru_cache"],
      ["functools.singledispatch", "functools.update_wrapper", "functools.wraps"]),
    q("a06", "Through which attribute does an `lru_cache`-decorated function expose the original "
             "function?", "__wrapped__",
      ["functools.lru_cache"],
      ["functools.update_wrapper", "functools.wraps", "functools.singledispatch"]),
    q("a07", "What is the default of the `assigned` argument of `functools.update_wrapper`?",
      "WRAPPER_ASSIGNMENTS", ["functools.update_wrapper"],
      ["functools.wraps", "functools.lru_cache", "functools.singledispatch"]),
    q("a08", "On the type of which argument does a `functools.singledispatch` function pick its "
             "implementation?", "first argument",
      ["functools.singledispatch"],
      ["functools.reduce", "functools.wraps", "functools.update_wrapper", "functools.lru_cache"]),
    q("a09", "In which order does `functools.reduce` combine the items of the iterable?",
      "left to right", ["functools.reduce"],
      ["functools.singledispatch", "functools.lru_cache", "functools.wraps"]),
    q("a10", "Which exception does `shutil.copy` raise when source and destination are the same "
             "file?", "SameFileError",
      ["shutil.copy"], ["shutil.copy2", "shutil.copystat", "shutil.move"]),
    q("a11", "Which function does `shutil.copy2` copy the metadata with?",
      "copystat", ["shutil.copy2"], ["shutil.copy", "shutil.copytree-copy", "shutil.move"]),
    q("a12", "Which argument of `shutil.copytree` lets you leave some files out of the copy?",
      "ignore argument", ["shutil.copytree-ignore"],
      ["shutil.copytree-symlinks", "shutil.copytree-copy", "shutil.rmtree"]),
    q("a13", "Which exception does `shutil.copytree` raise when `dst` exists and `dirs_exist_ok` "
             "is false?", "FileExistsError",
      ["shutil.copytree-copy"],
      ["shutil.copytree-symlinks", "shutil.copytree-ignore", "shutil.move", "shutil.copy"]),
    q("a14", "Which function does `shutil.copytree` use by default to copy each file?",
      "copy2", ["shutil.copytree-copy"],
      ["shutil.copy", "shutil.copytree-ignore", "shutil.copytree-symlinks", "shutil.copystat"]),
    q("a15", "Which flag of `shutil.copytree` silences the error for a symlink whose target does "
             "not exist?", "ignore_dangling_symlinks",
      ["shutil.copytree-symlinks"],
      ["shutil.copytree-ignore", "shutil.copytree-copy", "shutil.rmtree", "shutil.copy"]),
    q("a16", "Which callback handles errors in `shutil.rmtree` when `ignore_errors` is not set?",
      "onerror", ["shutil.rmtree"],
      ["shutil.copytree-symlinks", "shutil.move", "shutil.unpack_archive"]),
    q("a17", "When does `shutil.move` simply use `rename()`?",
      "current filesystem", ["shutil.move"],
      ["shutil.copy", "shutil.copy2", "shutil.copytree-copy"]),
    q("a18", "What does `shutil.make_archive` return?",
      "name of the archive file", ["shutil.make_archive"],
      ["shutil.unpack_archive", "shutil.register_unpack_format", "shutil.copytree-copy"]),
    q("a19", "Which exception does `shutil.unpack_archive` raise when no unpacker is registered "
             "for the format?", "ValueError",
      ["shutil.unpack_archive"],
      ["shutil.make_archive", "shutil.register_unpack_format", "shutil.rmtree"]),
    q("a20", "What size does `shutil.get_terminal_size` fall back to by default?",
      "80, 24", ["shutil.get_terminal_size"],
      ["shutil.which", "shutil.make_archive", "shutil.rmtree"]),
    q("a21", "What does `shutil.which` use as the default `mode`?",
      "os.F_OK | os.X_OK", ["shutil.which"],
      ["shutil.get_terminal_size", "shutil.copy", "shutil.move"]),
    q("a22", "What must an unpacking function registered with `shutil.register_unpack_format` "
             "raise when it cannot handle an archive?", "ReadError",
      ["shutil.register_unpack_format"],
      ["shutil.unpack_archive", "shutil.make_archive", "shutil.rmtree"]),
    q("a23", "What does `json.dumps` raise for a circular reference when `check_circular` is "
             "false?", "RecursionError",
      ["json.dumps-ascii"], ["json.dumps-indent", "json.dumps-default", "json.loads-hooks"]),
    q("a24", "What does an `indent` of 0 do in `json.dumps`?",
      "only insert newlines", ["json.dumps-indent"],
      ["json.dumps-ascii", "json.dumps-default", "json.loads-parse"]),
    q("a25", "When both object hooks are given to `json.loads`, which one takes priority?",
      "object_pairs_hook", ["json.loads-hooks"],
      ["json.loads-parse", "json.dumps-default", "json.dumps-ascii"]),
    q("a26", "What is `parse_int` equivalent to by default in `json.loads`?",
      "int(num_str)", ["json.loads-parse"],
      ["json.loads-hooks", "json.dumps-indent", "json.dumps-ascii"]),
    q("a27", "What does the default `default(obj)` of `json.dumps` do with an object it cannot "
             "serialize?", "raises TypeError",
      ["json.dumps-default"], ["json.dumps-ascii", "json.dumps-indent", "json.loads-hooks"]),
    q("a28", "What does `re.subn` return?",
      "2-tuple", ["re.subn"], ["re.sub", "re.split", "re.findall"]),
    q("a29", "What does `re.findall` return when the pattern has more than one group?",
      "list of tuples", ["re.findall"], ["re.split", "re.sub", "re.subn"]),
    q("a30", "Where does `re.split` put the rest of the string once `maxsplit` splits are made?",
      "final element", ["re.split"], ["re.findall", "re.sub", "re.subn"]),
    q("a31", "What is a callable `repl` passed by `re.sub` and `re.subn`?",
      "Match object", ["re.sub", "re.subn"], ["re.findall", "re.split"]),
    q("a32", "What does `tempfile.mkstemp` return?",
      "(fd, name)", ["tempfile.mkstemp-name"],
      ["tempfile.mkdtemp", "tempfile.mktemp",
       "tempfile.NamedTemporaryFile", "tempfile.TemporaryFile"]),
    q("a33", "In which mode does `tempfile.mkstemp` open the file unless `text` is true?",
      "binary mode", ["tempfile.mkstemp-name"],
      ["tempfile.mkstemp-safety", "tempfile.TemporaryFile", "tempfile.mkdtemp"]),
    q("a34", "Is the file descriptor from `tempfile.mkstemp` passed on to child processes?",
      "not inherited", ["tempfile.mkstemp-safety"],
      ["tempfile.mkdtemp", "tempfile.TemporaryFile", "tempfile.NamedTemporaryFile"]),
    q("a35", "Besides readable and writable, what is the directory from `tempfile.mkdtemp` for its "
             "creating user?", "searchable",
      ["tempfile.mkdtemp"],
      ["tempfile.mkstemp-safety", "tempfile.mktemp", "tempfile.TemporaryFile"]),
    q("a36", "Is `tempfile.mktemp` safe to use?",
      "UNSAFE", ["tempfile.mktemp"],
      ["tempfile.mkstemp-safety", "tempfile.mkdtemp", "tempfile.NamedTemporaryFile"]),
    q("a37", "Which signal keeps a `tempfile.NamedTemporaryFile` from being deleted automatically "
             "on POSIX?", "SIGKILL",
      ["tempfile.NamedTemporaryFile"],
      ["tempfile.TemporaryFile", "tempfile.mkstemp-safety", "tempfile.mkdtemp"]),
    q("a38", "Does the file made by `tempfile.TemporaryFile` have a name?",
      "no name", ["tempfile.TemporaryFile"],
      ["tempfile.NamedTemporaryFile", "tempfile.mkstemp-name", "tempfile.mktemp"]),
    q("a39", "Which exception does `queue.Queue.put` raise when no free slot opens up in time?",
      "Full exception", ["queue.Queue.put"],
      ["queue.Queue.get", "queue.Queue.join", "queue.Queue.task_done"]),
    q("a40", "What does `queue.Queue.get` raise when `block` is false and no item is available?",
      "Empty exception", ["queue.Queue.get"],
      ["queue.Queue.put", "queue.Queue.empty", "queue.Queue.full"]),
    q("a41", "When does `queue.Queue.join` unblock?",
      "drops to zero", ["queue.Queue.join"],
      ["queue.Queue.task_done", "queue.Queue.empty", "queue.Queue.get"]),
    q("a42", "What does `queue.Queue.task_done` raise when called more times than there were "
             "items?", "ValueError",
      ["queue.Queue.task_done"],
      ["queue.Queue.join", "queue.Queue.get", "queue.Queue.put", "queue.Queue.empty"]),
    q("a43", "What does the docstring of `queue.Queue.empty` give as a direct substitute for it?",
      "qsize() == 0", ["queue.Queue.empty"],
      ["queue.Queue.full", "queue.Queue.join", "queue.Queue.task_done"]),
    q("a44", "How do you tell whether `threading.Thread.join` timed out?",
      "is_alive()", ["threading.Thread.join"],
      ["threading.Event.wait", "threading.Condition.wait",
       "threading.Thread.start", "threading.Thread.daemon"]),
    q("a45", "What does `threading.Event.wait` return on exit?",
      "internal flag", ["threading.Event.wait"],
      ["threading.Condition.wait", "threading.Semaphore.acquire", "threading.Thread.join"]),
    q("a46", "When does the whole Python program exit, as far as daemon threads go?",
      "only daemon threads are left", ["threading.Thread.daemon"],
      ["threading.Thread.start", "threading.Thread.join", "threading.Event.wait"]),
    q("a47", "How often may `threading.Thread.start` be called on one thread object?",
      "at most once", ["threading.Thread.start"],
      ["threading.Thread.join", "threading.Thread.daemon", "threading.Barrier.wait"]),
    q("a48", "What does `threading.Barrier.wait` return?",
      "index number", ["threading.Barrier.wait"],
      ["threading.Event.wait", "threading.Condition.wait", "threading.Semaphore.acquire"]),
    q("a49", "What does a `threading.BoundedSemaphore` raise when its value would exceed its "
             "initial value?", "ValueError",
      ["threading.BoundedSemaphore"],
      ["threading.Semaphore.acquire", "threading.RLock", "threading.Condition.wait"]),
    q("a50", "Which thread must release a `threading.RLock`?",
      "thread that acquired it", ["threading.RLock"],
      ["threading.BoundedSemaphore", "threading.Semaphore.acquire", "threading.Condition.wait"]),
    q("a51", "What does `threading.Semaphore.acquire` return when it cannot complete within the "
             "timeout?", "false",
      ["threading.Semaphore.acquire"],
      ["threading.BoundedSemaphore", "threading.RLock", "threading.Event.wait"]),
    q("a52", "Which lock does `threading.Condition.wait` release while it blocks?",
      "underlying lock", ["threading.Condition.wait"],
      ["threading.Event.wait", "threading.Semaphore.acquire", "threading.RLock"]),
    q("a53", "What does `urllib.parse.parse_qs` return?",
      "dictionary", ["urllib.parse.parse_qs"],
      ["urllib.parse.parse_qsl", "urllib.parse.urlencode", "urllib.parse.urlsplit"]),
    q("a54", "What does `urllib.parse.parse_qsl` return?",
      "list", ["urllib.parse.parse_qsl"],
      ["urllib.parse.parse_qs", "urllib.parse.urlencode", "urllib.parse.unquote"]),
    q("a55", "Into how many components does `urllib.parse.urlsplit` parse a URL?",
      "5", ["urllib.parse.urlsplit"],
      ["urllib.parse.urlparse", "urllib.parse.parse_qs", "urllib.parse.urlencode"]),
    q("a56", "Since which Python version does `urllib.parse.quote` follow RFC 3986?",
      "3.7", ["urllib.parse.quote"],
      ["urllib.parse.unquote", "urllib.parse.urlencode", "urllib.parse.parse_qsl"]),
    q("a57", "What does `urllib.parse.unquote` replace invalid percent-encoded sequences with by "
             "default?", "placeholder character",
      ["urllib.parse.unquote"],
      ["urllib.parse.quote", "urllib.parse.parse_qs", "urllib.parse.urlencode"]),
    q("a58", "How does `urllib.parse.urlencode` treat the elements of a sequence value when "
             "`doseq` is true?", "separate parameter",
      ["urllib.parse.urlencode"],
      ["urllib.parse.parse_qs", "urllib.parse.parse_qsl", "urllib.parse.quote"]),
    q("a59", "To which letter does `base64.b32decode` map the digit 0 when `map01` is set?",
      "letter O", ["base64.b32decode"],
      ["base64.b16decode", "base64.b64decode", "base64.a85decode"]),
    q("a60", "Which implementation always pads the input, according to `base64.a85encode`?",
      "btoa", ["base64.a85encode"], ["base64.a85decode", "base64.b64encode", "base64.b16decode"]),
    q("a61", "Which characters does `base64.a85decode` ignore in the input by default?",
      "whitespace characters", ["base64.a85decode"],
      ["base64.a85encode", "base64.b64decode", "base64.urlsafe_b64decode"]),
    q("a62", "How long must `altchars` be for `base64.b64encode`?",
      "length 2", ["base64.b64encode"],
      ["base64.urlsafe_b64decode", "base64.b16decode", "base64.a85encode"]),
    q("a63", "Which argument of `subprocess.run` captures both stdout and stderr?",
      "capture_output=True", ["subprocess.run-capture"],
      ["subprocess.check_output", "subprocess.CompletedProcess", "subprocess.Popen.communicate"]),
    q("a64", "Which exception does `subprocess.run` raise when the process takes too long?",
      "TimeoutExpired", ["subprocess.run-capture"],
      ["subprocess.check_output", "subprocess.Popen.communicate", "subprocess.run-input"]),
    q("a65", "What does `subprocess.getstatusoutput` strip from the output?",
      "trailing newline", ["subprocess.getstatusoutput"],
      ["subprocess.check_output", "subprocess.run-input", "subprocess.CompletedProcess"]),
    q("a66", "How do you capture standard error in the result of `subprocess.check_output`?",
      "stderr=STDOUT", ["subprocess.check_output"],
      ["subprocess.run-capture", "subprocess.Popen.communicate", "subprocess.getstatusoutput"]),
    q("a67", "What does `subprocess.Popen.communicate` return?",
      "tuple (stdout, stderr)", ["subprocess.Popen.communicate"],
      ["subprocess.run-input", "subprocess.check_output", "subprocess.getstatusoutput"]),
    q("a68", "What does a negative `returncode` of a `subprocess.CompletedProcess` mean?",
      "signals", ["subprocess.CompletedProcess"],
      ["subprocess.run-capture", "subprocess.check_output", "subprocess.getstatusoutput"]),
    q("a69", "What do the header strings of `difflib.context_diff` default to?",
      "blanks", ["difflib.context_diff"],
      ["difflib.unified_diff", "difflib.ndiff", "difflib.get_close_matches"]),
    q("a70", "What formula does `difflib.SequenceMatcher.ratio` compute?",
      "2.0*M / T", ["difflib.SequenceMatcher.ratio"],
      ["difflib.get_close_matches", "difflib.ndiff", "difflib.unified_diff"]),
    q("a71", "How many close matches does `difflib.get_close_matches` return at most by default?",
      "3", ["difflib.get_close_matches"],
      ["difflib.SequenceMatcher.ratio", "difflib.unified_diff", "difflib.ndiff"]),
    q("a72", "What is the default `charjunk` filter of `difflib.ndiff`?",
      "IS_CHARACTER_JUNK", ["difflib.ndiff"],
      ["difflib.unified_diff", "difflib.context_diff", "difflib.get_close_matches"]),
    q("a73", "How many data values does `statistics.variance` need at minimum?",
      "at least two", ["statistics.variance"],
      ["statistics.pvariance", "statistics.quantiles", "statistics.harmonic_mean"]),
    q("a74", "What is the optional mean argument of `statistics.pvariance` called?",
      "mu", ["statistics.pvariance"],
      ["statistics.variance", "statistics.quantiles", "statistics.harmonic_mean"]),
    q("a75", "How many cut points does `statistics.quantiles` return?",
      "n - 1", ["statistics.quantiles"],
      ["statistics.variance", "statistics.pvariance", "statistics.harmonic_mean"]),
    q("a76", "Which exception does `statistics.harmonic_mean` raise for empty data?",
      "StatisticsError", ["statistics.harmonic_mean"],
      ["statistics.variance", "statistics.pvariance", "statistics.quantiles"]),
    q("a77", "Above what file size must you pass `force_zip64` to `zipfile.ZipFile.open` when "
             "writing?", "2 GiB",
      ["zipfile.ZipFile.open"],
      ["zipfile.ZipFile-args", "zipfile.ZipFile-level", "shutil.make_archive"]),
    q("a78", "Which compression levels does `zipfile.ZipFile` accept with ZIP_BZIP2?",
      "1 through 9", ["zipfile.ZipFile-level"],
      ["zipfile.ZipFile-args", "zipfile.ZipFile.open", "shutil.make_archive"]),
    q("a79", "Which module does ZIP_DEFLATED compression need, according to `zipfile.ZipFile`?",
      "zlib", ["zipfile.ZipFile-args"],
      ["zipfile.ZipFile-level", "zipfile.ZipFile.open", "shutil.make_archive"]),
    q("a80", "What does `random.seed` seed from when called without an argument?",
      "current time", ["random.seed"], ["random.sample", "random.Random", "random.expovariate"]),
    q("a81", "What is `lambd` in `random.expovariate`?",
      "1.0 divided by the desired mean", ["random.expovariate"],
      ["random.seed", "random.sample", "random.Random"]),
    q("a82", "What happens to the population passed to `random.sample`?",
      "unchanged", ["random.sample"], ["random.seed", "random.Random", "random.expovariate"]),
)


# ---------------------------------------------------------------- docstrings


def resolve(name: str) -> Any:
    """The object a qualified name such as ``os.path.join`` or ``queue.Queue.get`` names."""
    parts = name.split(".")
    for split in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:split]))
        except ModuleNotFoundError:
            continue
        try:
            for attribute in parts[split:]:
                obj = getattr(obj, attribute)
        except AttributeError:
            break
        return obj
    raise InvalidInputError(f"{name!r} names no importable object; give a module and its "
                            "attributes, such as 'textwrap.wrap'")


def docstrings(names: set[str]) -> dict[str, str]:
    """The cleaned docstring (``inspect.getdoc``) of each named object."""
    docs = {}
    for name in sorted(names):
        doc = inspect.getdoc(resolve(name))
        if not doc:
            raise InvalidInputError(f"{name!r} has no docstring on this Python")
        docs[name] = doc
    return docs


# ---------------------------------------------------------------- the set


def build(docs: dict[str, str]) -> list[dict[str, Any]]:
    """The rows of ``api.jsonl``, checked; ``docs`` maps qualified names to docstrings."""
    missing = sorted({passage.topic for passage in P.values()} - set(docs))
    if missing:
        raise InvalidInputError(f"no docstring given for {missing}; pass docstrings() of every "
                                "object the passages name")
    return technical.build_rows(P, QUESTIONS, docs, check_question)


def check_question(question: Question, number: int, texts: dict[str, tuple[str, str]]) -> None:
    """Refuse a question that breaks a rule of the set (see the module docstring); ``texts``
    maps passage names to (text, title)."""
    if question.id != f"a{number:02d}":
        raise InvalidInputError(f"question {question.id} is number {number}; number the "
                                "questions a01, a02, ... in order")
    # The technical set's rules apply as they are, but they expect its ids (t01, ...): check the
    # question under that id and give its own id back in the message.
    stand_in = f"t{number:02d}"
    try:
        technical.check_question(replace(question, id=stand_in), number, texts)
    except InvalidInputError as error:
        message = str(error).replace(f"question {stand_in}", f"question {question.id}", 1)
        raise InvalidInputError(message) from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="compare with the committed file instead of writing it")
    args = parser.parse_args(argv)
    text = render(build(docstrings({passage.topic for passage in P.values()})))
    if args.check:
        same = OUTPUT.is_file() and OUTPUT.read_text(encoding="utf-8") == text
        print(f"{OUTPUT.name}: {'up to date' if same else 'differs from the build'}")
        return 0 if same else 1
    OUTPUT.write_text(text, encoding="utf-8")
    print(f"wrote {len(QUESTIONS)} questions to {OUTPUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
