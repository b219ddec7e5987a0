"""The prompt: instructions per policy, sources numbered exactly as the markers number them."""

from __future__ import annotations

from collections.abc import Sequence

from citeformer.grammar.markers import strip_markers
from citeformer.types import Policy, Source

__all__ = [
    "EXAMPLE_QUESTION",
    "EXAMPLE_SOURCES",
    "build_messages",
    "default_instructions",
    "format_sources",
    "render_prompt",
    "strip_markers",
]

_COMMON = (
    "Answer the question using only the numbered sources below. "
    "Cite a source by writing its number in square brackets, like [1]. "
    "Only the numbers of the sources below exist; never cite any other number."
)

DEFAULT_INSTRUCTIONS: dict[Policy, str] = {
    Policy.REQUIRED: (
        f"{_COMMON} Answer in one to three short sentences. End every sentence with the "
        "source number in brackets, before the period. Example: Paris is the capital of France [1]."
        " Begin with one sentence that answers the question, in the question's own words."
    ),
    Policy.QUOTES_ONLY: (
        f"{_COMMON} When you quote a source word for word, put the quote in double quotes and "
        'follow it with the source number. Example: The report calls it "a turning point" [2].'
    ),
    Policy.AUTO: (
        f"{_COMMON} Answer in one to three short sentences and cite the source of each fact. "
        "Example: Paris is the capital of France [1]."
    ),
}


# One worked exchange before the real question: small models copy a demonstrated format far more
# reliably than they follow a described one (measured on SmolLM2-135M: without it, REQUIRED
# answers ran to the sentence bound before the first marker).
EXAMPLE_SOURCES = (
    Source("The Nile is about 6,650 km long and flows through eleven countries."),
    Source("The Amazon carries more water than any other river."),
)
EXAMPLE_QUESTION = "How long is the Nile?"
EXAMPLE_ANSWERS: dict[Policy, str] = {
    Policy.REQUIRED: "The Nile is about 6,650 km long [1]. It flows through eleven countries [1].",
    Policy.QUOTES_ONLY: 'The Nile is "about 6,650 km long" [1].',
    Policy.AUTO: "The Nile is about 6,650 km long [1]. It flows through eleven countries [1].",
}


def default_instructions(policy: Policy) -> str:
    """The system instructions of ``policy`` that ``instructions=`` replaces."""
    return DEFAULT_INSTRUCTIONS[policy]


def format_sources(sources: Sequence[Source]) -> str:
    """The sources as the model sees them: ``[1] Title`` on its own line, then the text."""
    blocks = []
    for number, source in enumerate(sources, start=1):
        header = f"[{number}] {source.title}" if source.title else f"[{number}]"
        blocks.append(f"{header}\n{source.text.strip()}")
    return "\n\n".join(blocks)


def build_messages(
    question: str,
    sources: Sequence[Source],
    policy: Policy,
    instructions: str | None = None,
    history: Sequence[tuple[str, str]] = (),
) -> list[dict[str, str]]:
    """Chat messages: instructions, one worked example, earlier turns, sources and question.

    ``history`` holds the earlier turns of the conversation as (role, text) pairs.

    Earlier turns are shown without their citation markers: they numbered earlier sources, and a
    ``[2]`` left in the history would lead the model to cite this call's source 2 for it.
    """
    system = instructions if instructions is not None else DEFAULT_INSTRUCTIONS[policy]
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": _user_turn(EXAMPLE_QUESTION, EXAMPLE_SOURCES)},
        {"role": "assistant", "content": EXAMPLE_ANSWERS[policy]},
        *({"role": role, "content": strip_markers(text)} for role, text in history),
        {"role": "user", "content": _user_turn(question, sources)},
    ]


def _user_turn(question: str, sources: Sequence[Source]) -> str:
    return f"Sources:\n\n{format_sources(sources)}\n\nQuestion: {question.strip()}"


def render_prompt(messages: list[dict[str, str]], tokenizer: object) -> str:
    """Apply the tokenizer's chat template, or lay the turns out as a plain completion prompt."""
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(  # type: ignore[attr-defined, no-any-return]
            messages, tokenize=False, add_generation_prompt=True
        )
    parts = []
    for message in messages:
        if message["role"] == "assistant":
            parts.append(f"Answer:\n{message['content']}")
        else:
            parts.append(message["content"])
    return "\n\n".join(parts) + "\n\nAnswer:\n"
