"""Build ``technical.jsonl``: questions over the Python language reference shipped with CPython.

    python benchmarks/data/build_technical.py           # (re)write technical.jsonl beside this file
    python benchmarks/data/build_technical.py --check   # fail if the file differs from the build

The passages are cut from ``pydoc_data.topics.topics`` (the reference manual's sections as plain
text, installed with every CPython) by the table below: each passage names a topic and the first
and last words of one or more spans of it. A span starts at a paragraph or sentence start and ends
at a sentence or paragraph end; hard line wraps are joined, a word hyphenated across a line break
is rejoined, and runs of white space become one space, so a passage is the topic's own text with
its layout flattened. Spans skip code, grammar rules and tables. The reference text changes between
Python versions, so the built file is committed; this script reproduces it on the Python it was
built with (3.11). Elsewhere a span whose words moved fails the build, and ``--check`` reports any
other difference.

Every question is checked: 3 to 6 passages of 250 to 700 characters with no square brackets (any
bracketed span in an answer is then a citation attempt, never copied text), one or two gold
passages, a gold answer that ``citebench.metrics.contains_answer`` finds in a gold passage and in
neither a distractor nor the question, and ids ``t01``, ``t02``, ... in order. The passage order
is shuffled per question with a fixed seed, so the gold passage is not always first.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from citebench.metrics import contains_answer  # noqa: E402

from citeformer.errors import InvalidInputError  # noqa: E402

OUTPUT = HERE / "technical.jsonl"
MIN_CHARS, MAX_CHARS = 250, 700
MIN_PASSAGES, MAX_PASSAGES = 3, 6
MAX_GOLD = 2
_HEADING_RULE = re.compile(r"^(\*+|=+|-+)$")
_CLOSERS = ")\"'”’"


@dataclass(frozen=True)
class Cut:
    """A passage: spans of one topic, each given by its first and last words."""

    topic: str
    spans: tuple[tuple[str, str], ...]
    title: str | None = None
    """The passage's title; by default the topic's heading and the subsection's, if any."""


@dataclass(frozen=True)
class Question:
    id: str
    question: str
    answer: str
    gold: tuple[str, ...]
    distractors: tuple[str, ...]


def cut(topic: str, *spans: tuple[str, str], title: str | None = None) -> Cut:
    return Cut(topic, spans, title)


# ---------------------------------------------------------------- passages

P: dict[str, Cut] = {
    # control flow
    "for-loop": cut("for", ('The "starred_list" expression is evaluated once',
                            "and the loop terminates.")),
    "for-break": cut("for", ('A "break" statement executed', "if there is no next item.")),
    "for-target": cut("for", ("Names in the target list are not deleted", "and then 2."),
                      ("Changed in version 3.11:", "in the expression list.")),
    "while": cut("while", ("This repeatedly tests the expression", "testing the expression.")),
    "break": cut("break", ('"break" may only occur', "before really leaving the loop.")),
    "continue": cut("continue", ('"continue" may only occur', "starting the next loop cycle.")),
    "if": cut("if", ('The "if" statement is used for conditional execution:',
                     "used for conditional execution:"),
              ("It selects exactly one of the suites", "is executed.")),
    "return": cut("return", ('"return" may only occur', "before really leaving the function.")),
    "return-generator": cut("return", ("In a generator function",
                                       "in an asynchronous generator function.")),
    "yield": cut("yield", ("Yield expressions and statements are only used",
                           "refer to the Yield expressions section.")),
    # exceptions
    "try-except": cut("try", ('The "except" clause(s) specify one or more exception handlers.',
                              "it matches any exception.")),
    "try-except-as": cut("try", ('When an exception has been assigned using "as target"',
                                 'it is cleared at the end of the "except" clause.'),
                         ("This means the exception must be assigned to a different name",
                          "until the next garbage collection occurs.")),
    "try-except-star": cut("try", ("If the raised exception is not an exception group",
                                   "with an empty message string."),
                           ('An "except*" clause must have a matching type',
                            'cannot appear in an "except*" clause.')),
    "try-else": cut("try", ('The optional "else" clause is executed',
                            'are not handled by the preceding "except" clauses.')),
    "try-finally": cut("try", ('If "finally" is present, it specifies',
                               "the saved exception is discarded:"),
                       ("The exception information is not available to the program",
                        'during execution of the "finally" clause.')),
    "try-finally-return": cut("try", ('When a "return", "break" or "continue" statement is '
                                      'executed in the "try" suite', "the last one executed:"),
                              ("Changed in version 3.8:", "a problem with the implementation.")),
    "raise-bare": cut("raise", ("If no expressions are present", "the *value* is the instance "
                                                                 "itself.")),
    "raise-from": cut("raise", ('The "from" clause is used for exception chaining',
                                "both exceptions will be printed:")),
    "raise-context": cut("raise", ("A similar mechanism works implicitly",
                                   '"__context__" attribute:'),
                         ("Exception chaining can be explicitly suppressed",
                          'in the "from" clause:')),
    "raise-versions": cut("raise", ('Changed in version 3.3: "None" is now permitted',
                                    "the traceback it had when it was caught.")),
    "exceptions-intro": cut("exceptions", ("The Python interpreter raises an exception when",
                                           "occurred or not in the preceding code.")),
    "exceptions-model": cut("exceptions", ("Python uses the “termination” model",
                                           'except when the exception is "SystemExit".')),
    "assert": cut("assert", ('These equivalences assume that "__debug__"',
                             "determined when the interpreter starts.")),
    # context managers
    "with-intro": cut("with", ('The "with" statement is used to wrap the execution',
                               "encapsulated for convenient reuse."),
                      ('The "with" statement guarantees that if', "See step 7 below.")),
    "with-steps": cut("with", ('The execution of the "with" statement with one',
                               'from "__enter__()" is assigned to it.')),
    "with-exit": cut("with", ('7. The context manager’s "__exit__()" method is invoked.',
                              "for the kind of exit that was taken.")),
    "with-multi": cut("with", ("With more than one item", "were nested:"),
                      ("You can also write multi-item context managers",
                       "if the items are surrounded by parentheses."),
                      ("Changed in version 3.1: Support for multiple context expressions.",
                       "to break the statement in multiple lines.")),
    "cm-intro": cut("context-managers", ("A *context manager* is an object",
                                         "closing opened files, etc.")),
    "cm-enter-exit": cut("context-managers", ("object.__enter__(self)",
                                              'all three arguments will be "None".')),
    "cm-exit-return": cut("context-managers",
                          ("object.__exit__(self, exc_type, exc_value, traceback)",
                           "object.__exit__(self, exc_type, exc_value, traceback)"),
                          ("If an exception is supplied", "this is the caller’s responsibility.")),
    # names and scopes
    "global": cut("global", ('The "global" statement is a declaration',
                             'textually preceding that "global" statement.')),
    "global-restrictions": cut("global", ('Names listed in a "global" statement must not be '
                                          "defined", "silently change the meaning of the "
                                                     "program.")),
    "global-note": cut("global", ('**Programmer’s note:** "global" is a directive',
                                  'The same applies to the "eval()" and "compile()" functions.')),
    "nonlocal": cut("nonlocal", ('The "nonlocal" statement causes',
                                 "pre-existing bindings in the local scope.")),
    "del": cut("del", ("Deletion of a name removes the binding",
                       "as a free variable in a nested block.")),
    "augassign": cut("augassign", ('An augmented assignment expression like "x += 1"',
                                   "the old object is modified instead.")),
    "import-basic": cut("import", ('The basic import statement (no "from" clause)',
                                   "separated out into individual import statements.")),
    "import-star": cut("import", ('If the list of identifiers is replaced by a star',
                                  'where the "import" statement occurs.'),
                       ('The wild card form of import', 'will raise a "SyntaxError".')),
    "import-all": cut("import", ("The *public names* defined by a module",
                                 "imported and used within the module).")),
    "import-relative": cut("import", ("When specifying what module to import",
                                      "Three dots is up two levels, etc.")),
    "import-future": cut("import", ("A *future statement* is a directive to the compiler",
                                    "before the release in which the feature becomes "
                                    "standard.")),
    # functions
    "function-defaults": cut("function", ("**Default parameter values are evaluated",
                                          "test for it in the body of the function, e.g.:")),
    "function-default-syntax": cut("function", ("When one or more *parameters* have the form",
                                                "not expressed by the grammar.")),
    "function-decorators": cut("function", ("A function definition may be wrapped",
                                            "applied in nested fashion."),
                               ("Changed in version 3.9:", "see **PEP 614** for details.")),
    "function-call": cut("function", ("Function call semantics are described",
                                      "a new empty mapping of the same type.")),
    "function-positional": cut("function", ("Parameters after “\"*\"” or",
                                            "may only be passed by positional arguments."),
                               ('Changed in version 3.8: The "/" function parameter syntax',
                                "See **PEP 570** for details.")),
    "lambda": cut("lambda", ("Lambda expressions (sometimes called lambda forms)",
                             "behaves like a function object defined with:"),
                  ("See section Function definitions for the syntax",
                   "cannot contain statements or annotations.")),
    # literals and identifiers
    "numbers": cut("numbers", ("There are three types of numeric literals",
                               'and the literal "1".')),
    "integers": cut("integers", ("There is no limit for the length of integer literals",
                                 "which Python used before version 3.0."),
                    ("Changed in version 3.6:", "for grouping purposes in literals.")),
    "floating": cut("floating", ("Note that the integer and exponent parts",
                                 "underscores are supported for digit grouping."),
                    ("Changed in version 3.6:", "for grouping purposes in literals.")),
    "imaginary": cut("imaginary", ("An imaginary literal yields a complex number",
                                   "Some examples of imaginary literals:")),
    "identifiers-ascii": cut("identifiers", ("Within the ASCII range",
                                             "Case is significant.")),
    "identifiers-soft": cut("identifiers", ("New in version 3.10.",
                                            'that uses "match", "case" and "_" as identifier '
                                            "names.")),
    "identifiers-underscore": cut("identifiers", ('"_" In a "case" pattern',
                                                  "but it is not special to Python itself.")),
    "identifiers-dunder": cut("identifiers", ('"__*__" System-defined names',
                                              "is subject to breakage without warning.")),
    "identifiers-private": cut("identifiers", ('"__*" Class-private names.',
                                               "See section Identifiers (Names).")),
    "strings-prefix": cut("strings", ("One syntactic restriction not indicated",
                                      "see section Encoding declarations.")),
    "strings-quotes": cut("strings", ("In plain English:", "or the quote character.")),
    "strings-bytes": cut("strings", ('Bytes literals are always prefixed',
                                     'the "\'ur\'" syntax is not supported.')),
    "strings-escapes": cut("strings", ("2. As in Standard C, up to three octal digits",
                                       "a Unicode character with the given value.")),
    "strings-unrecognized": cut("strings", ("Unlike Standard C, all unrecognized escape",
                                            'and eventually a "SyntaxError".')),
    # operators
    "power-binding": cut("power", ("The power operator binds more tightly",
                                   "unary operators on its right."),
                         ("Thus, in an unparenthesized sequence", 'results in "-1".')),
    "power-types": cut("power", ("For int operands, the result has the same type",
                                 'using the special "__pow__()" method.')),
    "binary-multiply": cut("binary", ('The "*" (multiplication) operator',
                                      '"__mul__()" and "__rmul__()" methods.')),
    "binary-divide": cut("binary", ('The "/" (division) and "//" (floor division) operators',
                                    '"__truediv__()" and "__floordiv__()" methods.')),
    "binary-modulo": cut("binary", ('The "%" (modulo) operator yields the remainder',
                                    'equals "4*0.7 + 0.34".)'),
                         ('The floor division operator, the modulo operator, and the '
                          '"divmod()"', 'function if appropriate.')),
    "binary-add": cut("binary", ('The "+" (addition) operator', 'special "__sub__()" method.')),
    "conversions": cut("conversions", ("When a description of an arithmetic operator",
                                       "Extensions must define their own conversion behavior.")),
    "shifting": cut("shifting", ("The shifting operations have lower priority",
                                 "the arithmetic operations:"),
                    ("These operators accept integers as arguments.",
                     'multiplication with "pow(2,n)".')),
    "unary": cut("unary", ('The unary "-" (minus) operator',
                           'a "TypeError" exception is raised.')),
    "bitwise": cut("bitwise", ('The "&" operator yields the bitwise AND',
                               '"__or__()" or "__ror__()" special methods.')),
    "booleans-false": cut("booleans", ("In the context of Boolean operations",
                                       'if its argument is false, "False" otherwise.')),
    "booleans-and-or": cut("booleans", ('The expression "x or y" first evaluates',
                                        'produces "False" rather than "\'\'".)')),
    "truth": cut("truth", ("Any object can be tested for truth value",
                           "operand of the Boolean operations below."),
                 ("Operations and built-in functions that have a Boolean result",
                  "always return one of their operands.)")),
    "comparisons-intro": cut("comparisons", ("Unlike C, all comparison operations",
                                             "conventional in mathematics:"),
                             ('Comparisons yield boolean values: "True" or "False".',
                              'call "bool()" on such value in boolean contexts.')),
    "comparisons-chain": cut("comparisons", ("Comparisons can be chained arbitrarily",
                                             "(though perhaps not pretty).")),
    "comparisons-default": cut("comparisons", ('The default behavior for equality comparison',
                                               "the lack of a similar invariant as for "
                                               "equality.")),
    "comparisons-nan": cut("comparisons", ('The not-a-number values "float(\'NaN\')"',
                                           "This behavior is compliant with IEEE 754.")),
    "comparisons-sequences": cut("comparisons", ('* Sequences (instances of "tuple", "list", '
                                                 'or "range")', "maintain their internal "
                                                                "invariants.")),
    # special methods
    "custom-new": cut("customization", ('Called to create a new instance of class *cls*.',
                                        "(usually an instance of *cls*)."),
                      title="Basic customization: object.__new__()"),
    "custom-init-del": cut("customization", ('Because "__new__()" and "__init__()" work '
                                             "together",
                                             "base class part of the instance."),
                           title="Basic customization: object.__init__() and object.__del__()"),
    "custom-resurrection": cut("customization", ("It is possible (though not recommended!)",
                                                 "still exist when the interpreter exits.")),
    "custom-repr": cut("customization", ("object.__repr__(self)",
                                         "that class is required.")),
    "custom-str": cut("customization", ("object.__str__(self)",
                                        'calls "object.__repr__()".')),
    "custom-hash-width": cut("customization", ('"hash()" truncates the value returned',
                                               'print(sys.hash_info.width)"".'),
                             title="Basic customization: object.__hash__()"),
    "custom-hash-none": cut("customization", ('A class that overrides "__eq__()" and does not '
                                              'define "__hash__()"',
                                              '"__hash__ = <ParentClass>.__hash__".')),
    "custom-hash-salt": cut("customization", ('By default, the "__hash__()" values of str and '
                                              "bytes", 'See also "PYTHONHASHSEED".'),
                            title="Basic customization: object.__hash__()"),
    "custom-bool": cut("customization", ("object.__bool__(self)",
                                         "all its instances are considered true.")),
    "special-len": cut("specialnames", ("object.__len__(self)",
                                        'an object must define a "__bool__()" method.')),
    # built-in types
    "dict-keys": cut("typesmapping", ("A dictionary’s keys are *almost* arbitrary values.",
                                      "to index the same dictionary entry.")),
    "dict-get": cut("typesmapping", ("Return the value for *key* if *key* is in the "
                                     "dictionary, else", "See the documentation of view "
                                                         "objects."),
                    title="Mapping Types — dict: get() and items()"),
    "dict-fromkeys": cut("typesmapping", ("Create a new dictionary with keys from *iterable*",
                                          "use a dict comprehension instead."),
                         title="Mapping Types — dict: fromkeys()"),
    "dict-popitem": cut("typesmapping", ("popitem()", "would return an arbitrary key/value "
                                                      "pair.")),
    "dict-merge": cut("typesmapping", ("d | other", "New in version 3.9."),
                      ("d |= other", "New in version 3.9.")),
    "dict-order": cut("typesmapping", ("Dictionaries preserve insertion order.",
                                       "inserted at the end."),
                      ("Changed in version 3.7: Dictionary order is guaranteed",
                       "detail of CPython from 3.6."),
                      ("Dictionaries and dictionary views are reversible.",
                       "reversible."),
                      ("Changed in version 3.8: Dictionaries are now reversible.",
                       "Dictionaries are now reversible.")),
    "mutable-intro": cut("typesseq-mutable", ("The operations in the following table are "
                                              "defined on mutable", 'value restriction '
                                                                    '"0 <= x <= 255").')),
    "mutable-notes": cut("typesseq-mutable", ("1. *t* must have the same length",
                                              "does not return the reversed sequence.")),
    "mutable-notes-clear": cut("typesseq-mutable", ('5. "clear()" and "copy()" are included',
                                                    "under Common Sequence Operations.")),
    "list-sort": cut("typesseq", ("sort(*, key=None, reverse=False)",
                                  "(keyword-only arguments):")),
    "list-sort-stable": cut("typesseq", ("This method modifies the sequence in place for "
                                         "economy of space when sorting",
                                         "see Sorting HOW TO.")),
    "sequence-slices": cut("typesseq", ("3. If *i* or *j* is negative",
                                        "the slice is empty.")),
    "range": cut("typesseq", ('The "range" type represents an immutable sequence',
                              'specific number of times in "for" loops.'),
                 ("The arguments to the range constructor must be integers",
                  'If *step* is zero, "ValueError" is raised.')),
    "range-memory": cut("typesseq", ('The advantage of the "range" type over',
                                     "(see Sequence Types — list, tuple, range):")),
    "str-encode": cut("string-methods", ("str.encode(encoding='utf-8', errors='strict')",
                                         "See Error Handlers for details.")),
    "str-expandtabs": cut("string-methods", ("str.expandtabs(tabsize=8)",
                                             "columns 0, 8, 16 and so on).")),
    "str-join": cut("string-methods", ("str.join(iterable)",
                                       "string providing this method.")),
    "str-partition": cut("string-methods", ("str.partition(sep)",
                                            "followed by two empty strings.")),
    "str-rpartition": cut("string-methods", ("str.rpartition(sep)",
                                             "followed by the string itself.")),
    "str-split": cut("string-methods", ("str.split(sep=None, maxsplit=- 1)",
                                        "(all possible splits are made).")),
    "str-rsplit": cut("string-methods", ("str.rsplit(sep=None, maxsplit=- 1)",
                                         "which is described in detail below.")),
    "str-zfill": cut("string-methods", ("str.zfill(width)",
                                        'equal to "len(s)".')),
    "format-conversion": cut("formatstrings", ("The *conversion* field causes a type coercion",
                                               'and "\'!a\'" which calls "ascii()".')),
    "format-grouping": cut("formatstrings", ('The "\',\'" option signals the use of a comma',
                                             "(see also **PEP 515**).")),
    "format-alternate": cut("formatstrings", ('The "\'#\'" option causes the “alternate form”',
                                              'to the output value.')),
    "format-width": cut("formatstrings", ("*width* is a decimal integer",
                                          "the default alignment for strings.")),
    "format-precision": cut("formatstrings", ("The *precision* is a decimal integer",
                                              "not allowed for integer presentation types.")),
}

# ---------------------------------------------------------------- questions


def q(id_: str, question: str, answer: str, gold: list[str], distractors: list[str]) -> Question:
    return Question(id_, question, answer, tuple(gold), tuple(distractors))


QUESTIONS: tuple[Question, ...] = (
    q("t01", "When is the `else` clause of a `for` loop executed?", "exhausted",
      ["for-loop"], ["while", "try-else", "if", "break"]),
    q("t02", "What does a `continue` statement do inside a `while` loop?",
      "testing the expression", ["while", "continue"], ["for-break", "break"]),
    q("t03", "Which value does the loop variable keep when `break` ends a `for` loop?",
      "current value", ["break"], ["for-target", "for-loop", "continue", "while", "return"]),
    q("t04", "What happens to a saved exception when the `finally` clause executes `return`?",
      "discarded", ["try-finally"], ["try-finally-return", "try-except-as", "return",
                                     "raise-context"]),
    q("t05", "When is the `else` clause of a `try` statement executed?",
      "no exception was raised", ["try-else"], ["for-loop", "if", "try-finally"]),
    q("t06", "Before which Python version was `continue` illegal in a `finally` clause?", "3.8",
      ["try-finally-return"], ["continue", "break", "with-multi", "for-target"]),
    q("t07", "What happens to the name bound by `except E as N` at the end of the clause?",
      "cleared", ["try-except-as"], ["try-except", "raise-context", "try-finally"]),
    q("t08", "The type in an `except*` clause cannot be a subclass of which class?",
      "BaseExceptionGroup", ["try-except-star"], ["try-except", "exceptions-model",
                                                  "raise-bare"]),
    q("t09", "How many `None` arguments does `__exit__()` get when the `with` block ends "
             "without an exception?", "three",
      ["with-exit", "cm-enter-exit"], ["with-steps", "cm-intro", "try-finally"]),
    q("t10", "What should `__exit__()` return to suppress an exception?", "true value",
      ["cm-exit-return", "with-exit"], ["cm-intro", "with-intro", "raise-bare"]),
    q("t11", "Since which Python version can the items of a `with` statement be wrapped in "
             "parentheses over several lines?", "3.10",
      ["with-multi"], ["with-intro", "try-finally-return", "for-target", "raise-versions"]),
    q("t12", "Why are leading zeros not allowed in a non-zero decimal integer literal?", "octal",
      ["integers"], ["floating", "numbers", "imaginary"]),
    q("t13", "Since which Python version can underscores group the digits of a numeric "
             "literal?", "3.6", ["integers", "floating"], ["imaginary", "numbers",
                                                           "strings-bytes"]),
    q("t14", "What is the real part of the complex number that an imaginary literal yields?",
      "0.0", ["imaginary"], ["floating", "numbers", "integers"]),
    q("t15", "What does `10**-2` return?", "0.01",
      ["power-types"], ["power-binding", "binary-divide", "shifting", "unary"]),
    q("t16", "In which order are power and unary operators evaluated without parentheses?",
      "right to left",
      ["power-binding"], ["unary", "binary-add", "bitwise"]),
    q("t17", "What does `3.14%0.7` equal?", "0.34",
      ["binary-modulo"], ["binary-divide", "floating", "conversions"]),
    q("t18", "What type of result does dividing two integers with `/` give?", "float",
      ["binary-divide"], ["shifting", "bitwise", "unary", "binary-multiply"]),
    q("t19", "A right shift by n bits is defined as what operation?", "floor division",
      ["shifting"], ["bitwise", "unary", "power-binding"]),
    q("t20", "How is the bitwise inversion of `x` defined?", "-(x+1)",
      ["unary"], ["bitwise", "shifting", "booleans-false"]),
    q("t21", "Which special methods let a custom object support the `^` operator?", "__xor__",
      ["bitwise"], ["unary", "shifting", "binary-add", "custom-bool"]),
    q("t22", "What do `and` and `or` return, if not `True` or `False`?",
      "last evaluated argument", ["booleans-and-or", "truth"],
      ["comparisons-intro", "booleans-false", "unary"]),
    q("t23", "Which method does truth testing call when a class does not define `__bool__()`?",
      "__len__", ["custom-bool", "special-len"],
      ["booleans-false", "truth", "custom-repr"]),
    q("t24", "How long can a Python identifier be?", "unlimited",
      ["identifiers-ascii"], ["integers", "identifiers-soft", "identifiers-private"]),
    q("t25", "In which Python version were soft keywords introduced?", "3.10",
      ["identifiers-soft"], ["identifiers-ascii", "identifiers-underscore",
                             "identifiers-dunder", "integers"]),
    q("t26", "What are names of the form `__*__` informally called?", "dunder",
      ["identifiers-dunder"], ["identifiers-private", "identifiers-underscore", "custom-new"]),
    q("t27", "What happens to a class-private name such as `__spam` inside a class "
             "definition?", "mangled",
      ["identifiers-private"], ["identifiers-dunder", "identifiers-underscore", "global"]),
    q("t28", "From which numeric value on must bytes be written as escapes in a bytes literal?",
      "128", ["strings-bytes"], ["strings-escapes", "strings-unrecognized", "mutable-intro",
                                 "strings-quotes"]),
    q("t29", "At most how many digits does an octal escape in a string literal accept?",
      "three", ["strings-escapes"], ["strings-bytes", "strings-unrecognized", "integers"]),
    q("t30", "What does a bare `raise` raise when no exception is being handled?",
      "RuntimeError", ["raise-bare"], ["try-except", "exceptions-model", "raise-from"]),
    q("t31", "Which attribute holds the exception given in the `from` clause of `raise`?",
      "__cause__", ["raise-from"], ["raise-context", "raise-bare", "exceptions-model",
                                    "try-except-as"]),
    q("t32", "Since which Python version may `None` be used in `raise X from Y`?", "3.3",
      ["raise-versions"], ["raise-context", "with-multi", "try-finally-return",
                           "function-positional"]),
    q("t33", "Which exception does a `return` statement inside a generator cause?",
      "StopIteration", ["return-generator"], ["yield", "return", "break"]),
    q("t34", "Which command line option makes `__debug__` false?", "-O",
      ["assert"], ["exceptions-model", "raise-bare", "global-note"]),
    q("t35", "Which exception does `del` raise for a name that is not bound?", "NameError",
      ["del"], ["global", "nonlocal", "augassign"]),
    q("t36", "Does a `global` statement in a string passed to `exec()` affect the code that "
             "calls `exec()`?", "does not affect",
      ["global-note"], ["global", "nonlocal", "global-restrictions"]),
    q("t37", "Where does a `nonlocal` statement look for the variables it names?",
      "nearest enclosing scope", ["nonlocal"], ["global", "del", "function-call", "lambda"]),
    q("t38", "What can a function created by a lambda expression not contain?",
      "statements or annotations", ["lambda"], ["function-defaults", "function-decorators",
                                                "yield"]),
    q("t39", "How many times is a default parameter value evaluated?", "once",
      ["function-defaults"], ["function-decorators", "function-call", "lambda"]),
    q("t40", "What is `*args` set to when a call passes no excess positional arguments?",
      "empty tuple", ["function-call"], ["function-default-syntax", "function-positional",
                                         "lambda", "function-decorators"]),
    q("t41", "Since which Python version can `/` mark positional-only parameters?", "3.8",
      ["function-positional"], ["function-decorators", "function-call", "identifiers-soft"]),
    q("t42", "In which order does `dict.popitem()` return pairs?", "LIFO",
      ["dict-popitem"], ["dict-order", "dict-get", "dict-merge", "mutable-notes"]),
    q("t43", "Since which Python version is dictionary order guaranteed to be insertion "
             "order?", "3.7", ["dict-order"], ["dict-merge", "dict-fromkeys", "dict-get"]),
    q("t44", "Since which Python version do dictionaries support the `|` operator?", "3.9",
      ["dict-merge"], ["dict-order", "dict-popitem", "dict-keys", "range"]),
    q("t45", "What is the largest value a `bytearray` item can hold?", "255",
      ["mutable-intro"], ["mutable-notes-clear", "strings-bytes", "list-sort"]),
    q("t46", "What is the default tab size of `str.expandtabs()`?", "8",
      ["str-expandtabs"], ["str-zfill", "str-join", "str-partition", "format-width"]),
    q("t47", "What does `str.partition()` return when the separator is not found?",
      "itself, followed by two empty strings",
      ["str-partition"], ["str-rpartition", "str-rsplit", "str-split"]),
    q("t48", "At most how many elements does `str.split()` return when `maxsplit` is given?",
      "maxsplit+1", ["str-split"], ["str-rsplit", "str-partition", "str-join"]),
    q("t49", "Which conversion flag calls `ascii()` on the value being formatted?", "!a",
      ["format-conversion"], ["format-grouping", "format-width", "custom-repr", "custom-str"]),
    q("t50", "How many digits apart does the `_` format option put underscores in hexadecimal "
             "output?", "4",
      ["format-grouping"], ["format-alternate", "format-width", "format-precision",
                            "integers"]),
    q("t51", "What is the default encoding of `str.encode()`?", "utf-8",
      ["str-encode"], ["str-zfill", "str-join", "strings-bytes"]),
    q("t52", "How many times is `y` evaluated in `x < y <= z`?", "once",
      ["comparisons-chain"], ["comparisons-intro", "comparisons-default", "booleans-and-or"]),
    q("t53", "Is a NaN value equal to itself?", "not equal",
      ["comparisons-nan"], ["comparisons-default", "comparisons-sequences", "truth"]),
    q("t54", "To how many bytes does `hash()` truncate a custom hash value on 64-bit builds?",
      "8 bytes", ["custom-hash-width"], ["custom-hash-salt", "custom-hash-none",
                                         "custom-bool"]),
    q("t55", "What becomes of `__hash__` in a class that overrides `__eq__()` but does not "
             "define `__hash__()`?", "None",
      ["custom-hash-none"], ["custom-hash-width", "custom-str", "comparisons-default"]),
    q("t56", "How many times does CPython call `__del__()` on a resurrected object?", "once",
      ["custom-resurrection"], ["custom-init-del", "custom-new", "del"]),
    q("t57", "Which exception is raised when `__init__()` returns something other than "
             "`None`?", "TypeError",
      ["custom-init-del"], ["custom-new", "custom-repr", "custom-resurrection"]),
    q("t58", "What kind of method is `__new__()`?", "static method",
      ["custom-new"], ["custom-init-del", "custom-str", "list-sort"]),
    q("t59", "What does `list.sort()` guarantee for elements that compare equal?", "stable",
      ["list-sort-stable"], ["list-sort", "mutable-notes", "str-join"]),
    q("t60", "Where is `from module import *` allowed?", "module level",
      ["import-star"], ["import-basic", "import-all", "global"]),
    q("t61", "How many package levels up does a relative import with three leading dots go?",
      "two levels", ["import-relative"], ["import-basic", "import-star", "import-future"]),
    q("t62", "Which model of error handling does Python use?", "termination",
      ["exceptions-model"], ["exceptions-intro", "try-except", "raise-bare"]),
    q("t63", "What does an augmented assignment like `x += 1` do when it can work in place?",
      "old object is modified", ["augassign"], ["binary-add", "del", "global"]),
    q("t64", "Which exception does `range()` raise when `step` is zero?", "ValueError",
      ["range"], ["range-memory", "sequence-slices", "list-sort"]),
)


# ---------------------------------------------------------------- cutting


@dataclass(frozen=True)
class Paragraph:
    indent: int
    text: str
    """The lines joined: hyphenated words rejoined, runs of white space made one space."""
    title: str
    """The heading of the topic and of the subsection holding the paragraph, if any."""
    kind: str
    """``text``, ``heading`` or ``footnote`` (paragraphs after the ``-[ Footnotes ]-`` line)."""


def paragraphs(topic_text: str) -> list[Paragraph]:
    """The blank-line-separated paragraphs of a topic, each on one line, with its title."""
    result: list[Paragraph] = []
    top = sub = ""
    footnotes = False
    for block in re.split(r"\n[ \t]*\n", topic_text):
        lines = [line for line in block.split("\n") if line.strip()]
        if not lines:
            continue
        indent = len(lines[0]) - len(lines[0].lstrip())
        if len(lines) == 2 and _HEADING_RULE.match(lines[1].strip()):
            heading = lines[0].strip().replace('"', "")
            if lines[1].strip()[0] == "*":
                top, sub = heading, ""
            else:
                sub = heading
            result.append(Paragraph(indent, heading, _title(top, sub), "heading"))
            continue
        footnotes = footnotes or lines[0].strip() == "-[ Footnotes ]-"
        result.append(Paragraph(indent, _join(lines), _title(top, sub),
                                "footnote" if footnotes else "text"))
    return result


def _title(top: str, sub: str) -> str:
    return f"{top}: {sub}" if sub else top


def _join(lines: list[str]) -> str:
    text = ""
    for line in (line.strip() for line in lines):
        # A word the text wrapper broke after its hyphen ("non-" / "virtual") is one word.
        if len(text) > 1 and text[-1] == "-" and text[-2].isalpha():
            text += line
        else:
            text = f"{text} {line}" if text else line
    return re.sub(r"\s+", " ", text)


def _ends_sentence(text: str) -> bool:
    return text.rstrip().rstrip(_CLOSERS).endswith((".", "!", "?"))


def _is_code(paragraph: Paragraph, base_indent: int) -> bool:
    # Grammar rules, doctests and tables are recognisable by their content; other code blocks
    # are indented deeper than the prose around them and do not end like a sentence.
    if any(mark in paragraph.text for mark in ("::=", ">>>", "+---", "|===")):
        return True
    return paragraph.indent > base_indent and not paragraph.text.endswith((".", ":", ".)"))


def cut_text(name: str, passage: Cut, topics: dict[str, str]) -> tuple[str, str]:
    """The text and title of one passage of the table; raises when a span is not where it says."""
    if passage.topic not in topics:
        raise InvalidInputError(f"passage {name!r}: no topic {passage.topic!r} in pydoc_data; "
                                "use one of pydoc_data.topics.topics")
    paras = paragraphs(topics[passage.topic])
    pieces: list[str] = []
    title = ""
    at = (0, 0)
    for first, last in passage.spans:
        start = _find(paras, first, at)
        if start is None:
            raise InvalidInputError(f"passage {name!r}: {first!r} not found in topic "
                                    f"{passage.topic!r} (after the previous span); "
                                    "copy the words from the installed topic")
        end = _find(paras, last, start)
        if end is None:
            raise InvalidInputError(f"passage {name!r}: {last!r} not found after {first!r}")
        end = (end[0], end[1] + len(last))
        pieces += _span_pieces(name, paras, start, end)
        title = title or paras[start[0]].title
        at = end
    return "\n".join(pieces), passage.title or title


def _find(paras: list[Paragraph], words: str, at: tuple[int, int]) -> tuple[int, int] | None:
    for index in range(at[0], len(paras)):
        offset = paras[index].text.find(words, at[1] if index == at[0] else 0)
        if offset >= 0:
            return index, offset
    return None


def _span_pieces(
    name: str, paras: list[Paragraph], start: tuple[int, int], end: tuple[int, int]
) -> list[str]:
    first, last = paras[start[0]], paras[end[0]]
    if start[1] and not _ends_sentence(first.text[:start[1]]):
        raise InvalidInputError(f"passage {name!r}: the span starting "
                                f"{first.text[start[1]:][:40]!r} starts mid-sentence; start it "
                                "at a sentence or paragraph")
    if end[1] < len(last.text) and not (last.text[end[1]] == " "
                                        and _ends_sentence(last.text[:end[1]])):
        raise InvalidInputError(f"passage {name!r}: the span ending "
                                f"{last.text[:end[1]][-40:]!r} ends mid-sentence; end it at a "
                                "sentence or paragraph end")
    pieces = []
    for index in range(start[0], end[0] + 1):
        paragraph = paras[index]
        if paragraph.kind != "text" or _is_code(paragraph, first.indent):
            raise InvalidInputError(f"passage {name!r}: the span crosses a {paragraph.kind} or "
                                    f"code paragraph {paragraph.text[:50]!r}; split the span "
                                    "around it")
        text = paragraph.text
        if index == end[0]:
            text = text[:end[1]]
        if index == start[0]:
            text = text[start[1]:]
        pieces.append(text)
    return pieces


# ---------------------------------------------------------------- the set


def build(topics: dict[str, str]) -> list[dict[str, Any]]:
    """The rows of ``technical.jsonl``, checked; raises on the first question that fails."""
    return build_rows(P, QUESTIONS, topics, check_question)


def build_rows(
    cuts: dict[str, Cut],
    questions: list[Question],
    topics: dict[str, str],
    check: Callable[[Question, int, dict[str, tuple[str, str]]], None],
) -> list[dict[str, Any]]:
    """The rows of a set cut from ``topics`` by ``cuts``, each question checked by ``check``."""
    texts = {name: cut_text(name, passage, topics) for name, passage in cuts.items()}
    for name, (text, _) in texts.items():
        check_passage(name, text, topics[cuts[name].topic])
    rows = []
    for number, question in enumerate(questions, 1):
        check(question, number, texts)
        names = [*question.gold, *question.distractors]
        random.Random(question.id).shuffle(names)
        passages = [{"id": f"p{k}", "title": texts[n][1], "text": texts[n][0]}
                    for k, n in enumerate(names, 1)]
        rows.append({
            "id": question.id,
            "question": question.question,
            "passages": passages,
            "gold_passages": [f"p{k}" for k, n in enumerate(names, 1) if n in question.gold],
            "answer": question.answer,
        })
    return rows


def check_passage(name: str, text: str, topic_text: str) -> None:
    """Refuse a passage of the wrong length, with a square bracket, or not from the topic."""
    if not MIN_CHARS <= len(text) <= MAX_CHARS:
        raise InvalidInputError(f"passage {name!r} has {len(text)} characters; cut it to "
                                f"{MIN_CHARS}-{MAX_CHARS}")
    if "[" in text or "]" in text:
        raise InvalidInputError(f"passage {name!r} holds a square bracket; answers copying it "
                                "would count as citation markers, so cut around it")
    # Verbatim up to layout: each span, white space removed, occurs in the topic likewise.
    topic = re.sub(r"\s+", "", topic_text)
    for piece in text.split("\n"):
        if re.sub(r"\s+", "", piece) not in topic:
            raise InvalidInputError(f"passage {name!r} is not verbatim: {piece[:60]!r}")


def check_question(question: Question, number: int, texts: dict[str, tuple[str, str]]) -> None:
    """Refuse a question that breaks a rule of the set (see the module docstring); ``texts``
    maps passage names to (text, title)."""
    where = f"question {question.id}"
    if question.id != f"t{number:02d}":
        raise InvalidInputError(f"{where} is number {number}; number the questions t01, t02, "
                                "... in order")
    names = [*question.gold, *question.distractors]
    unknown = [n for n in names if n not in texts]
    if unknown:
        raise InvalidInputError(f"{where} names unknown passages {unknown}; define them in P")
    if not MIN_PASSAGES <= len(names) <= MAX_PASSAGES or len(set(names)) != len(names):
        raise InvalidInputError(f"{where} has passages {names}; give {MIN_PASSAGES} to "
                                f"{MAX_PASSAGES} distinct ones")
    if not 1 <= len(question.gold) <= MAX_GOLD:
        raise InvalidInputError(f"{where} has {len(question.gold)} gold passages; give 1 or 2")
    if contains_answer(question.question, question.answer):
        raise InvalidInputError(f"{where}: the question itself holds the answer "
                                f"{question.answer!r}; an answer repeating it would count as "
                                "correct, so reword it")
    if not any(contains_answer(texts[n][0], question.answer) for n in question.gold):
        raise InvalidInputError(f"{where}: the answer {question.answer!r} is in no gold passage")
    leaks = [n for n in question.distractors if contains_answer(texts[n][0], question.answer)]
    if leaks:
        raise InvalidInputError(f"{where}: the answer {question.answer!r} is also in the "
                                f"distractors {leaks}; choose other distractors")


def render(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="compare with the committed file instead of writing it")
    args = parser.parse_args(argv)
    from pydoc_data.topics import topics

    text = render(build(topics))
    if args.check:
        same = OUTPUT.is_file() and OUTPUT.read_text(encoding="utf-8") == text
        print(f"{OUTPUT.name}: {'up to date' if same else 'differs from the build'}")
        return 0 if same else 1
    OUTPUT.write_text(text, encoding="utf-8")
    print(f"wrote {len(QUESTIONS)} questions to {OUTPUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
