"""Free text from a citeformer generator, and the standalone question of a follow-up.

A follow-up ("When was it finished?") retrieves nothing useful on its own; the model rewrites it
with the conversation into a question that does ("When was the Eiffel Tower finished?"). That
rewrite is free text: the same model runs without the citation grammar (``constrained=False``),
on a small prompt of its own.

Framework-free: both wrappers (``citeformer_langchain`` and ``citeformer_llamaindex``) use it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from citeformer.generation.aio import as_async
from citeformer.generation.protocols import AnswerGenerator
from citeformer.grammar.markers import strip_markers
from citeformer.prompt import render_prompt
from citeformer.request import GenerationRequest, build_request

__all__ = [
    "CONDENSE_INSTRUCTIONS",
    "CONDENSE_TURNS",
    "DEFAULT_CONDENSE_TOKENS",
    "EXAMPLE_FOLLOW_UP",
    "EXAMPLE_HISTORY",
    "EXAMPLE_STANDALONE",
    "acondense",
    "condense",
    "condense_messages",
    "free_text_request",
    "standalone_question",
]

DEFAULT_CONDENSE_TOKENS = 32
"""Tokens the standalone question may take: one question, with room to spare."""

CONDENSE_INSTRUCTIONS = (
    "Rewrite the user's follow-up question so that it can be understood without the "
    "conversation. Replace words like it, he, she, they with what they refer to. Write only the "
    "rewritten question."
)

# One worked example before the real rewrite: small models copy a demonstrated format far more
# reliably than they follow a described one (SmolLM2-135M rewrites "When was it finished?" after
# an Eiffel Tower turn as "When was the Eiffel Tower finished?" with it).
EXAMPLE_HISTORY = (
    ("user", "Tell me about the Nile."),
    ("assistant", "The Nile is a river in Africa. It flows through eleven countries."),
)
EXAMPLE_FOLLOW_UP = "How long is it?"
EXAMPLE_STANDALONE = "How long is the Nile?"

CONDENSE_TURNS = 6
"""Earlier turns shown to the rewrite, the latest: what "it" refers to is almost always there."""

_LABEL = re.compile(r"^\s*(?:standalone|rewritten)?\s*question\s*:\s*", re.IGNORECASE)


def condense_messages(
    history: Sequence[tuple[str, str]], question: str
) -> list[dict[str, str]]:
    """The chat messages that ask for the standalone question of ``question`` after ``history``.

    The conversation is shown as text: the last ``CONDENSE_TURNS`` turns, without citation
    markers (they numbered the sources of earlier turns, which this step does not see), each
    answer by its first sentence. A whole answer led SmolLM2-135M to copy the follow-up
    unchanged; its first sentence names the subject, which is what the rewrite needs.
    """
    return [
        {"role": "system", "content": CONDENSE_INSTRUCTIONS},
        {"role": "user", "content": _conversation(EXAMPLE_HISTORY, EXAMPLE_FOLLOW_UP)},
        {"role": "assistant", "content": EXAMPLE_STANDALONE},
        {"role": "user", "content": _conversation(history[-CONDENSE_TURNS:], question)},
    ]


def free_text_request(
    generator: AnswerGenerator, messages: Sequence[dict[str, str]] | str, **options: Any
) -> GenerationRequest:
    """A request for free text, without the grammar.

    From the chat ``messages``, or a prompt already rendered.

    The generator's tokenizer renders the messages with the model's chat template; a generator
    without one (a ``ServerGenerator``) gets the plain completion layout, sent to
    ``/v1/completions``. ``options`` are ``build_request``'s decoding options
    (``max_new_tokens``, ``do_sample``...). The request's question and only source are the last
    message: a request needs both, and neither is shown, since the prompt replaces the built-in
    one.
    """
    if isinstance(messages, str):
        prompt = last = messages
    else:
        prompt = render_prompt(list(messages), getattr(generator, "tokenizer", None))
        last = next((m["content"] for m in reversed(messages) if m["content"].strip()), prompt)
    return build_request(last, [last], prompt=prompt, constrained=False, **options)


def standalone_question(text: str, fallback: str) -> str:
    """The question in a model's rewrite: its first line, without a label or quotes.

    ``fallback`` (the follow-up as asked) when the rewrite holds no text.
    """
    lines = [line for line in text.strip().splitlines() if line.strip()]
    question = _LABEL.sub("", lines[0]) if lines else ""
    question = question.strip().strip("\"'`").strip()
    return question or fallback


def condense(
    generator: AnswerGenerator,
    history: Sequence[tuple[str, str]],
    question: str,
    *,
    max_new_tokens: int = DEFAULT_CONDENSE_TOKENS,
) -> str:
    """The standalone question of ``question`` after ``history``.

    ``question`` itself when there is no history (nothing to resolve, no generation).
    """
    if not history:
        return question
    request = free_text_request(
        generator, condense_messages(history, question), max_new_tokens=max_new_tokens
    )
    return standalone_question(generator.answer(request).text, question)


async def acondense(
    generator: AnswerGenerator,
    history: Sequence[tuple[str, str]],
    question: str,
    *,
    max_new_tokens: int = DEFAULT_CONDENSE_TOKENS,
) -> str:
    """Async ``condense``, asked through ``citeformer.integration.as_async``.

    An async generator is awaited; a model in this process generates in a worker thread, off the
    event loop.
    """
    if not history:
        return question
    request = free_text_request(
        generator, condense_messages(history, question), max_new_tokens=max_new_tokens
    )
    return standalone_question((await as_async(generator).answer(request)).text, question)


def _conversation(history: Sequence[tuple[str, str]], question: str) -> str:
    turns = "\n".join(
        f"User: {strip_markers(text)}" if role == "user"
        else f"Assistant: {_first_sentence(strip_markers(text))}"
        for role, text in history
    )
    return f"Conversation:\n{turns}\n\nFollow-up question: {question.strip()}"


_SENTENCE = re.compile(r".+?[.!?](?=\s|$)", re.DOTALL)


def _first_sentence(text: str) -> str:
    found = _SENTENCE.match(text.strip())
    return " ".join((found.group(0) if found else text).split())
