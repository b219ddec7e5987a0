"""The prompt: instructions per policy, sources numbered exactly as the markers number them."""

from __future__ import annotations

from collections.abc import Sequence

from citeformer.types import Policy, Source

_COMMON = (
    "Answer the question using only the numbered sources below. "
    "Cite a source by writing its number in square brackets, like [1]. "
    "Only the numbers of the sources below exist; never cite any other number."
)

DEFAULT_INSTRUCTIONS: dict[Policy, str] = {
    Policy.REQUIRED: (
        f"{_COMMON} Answer in one to three short sentences. End every sentence with the "
        "source number in brackets, before the period. Example: Paris is the capital of France [1]."
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


def format_sources(sources: Sequence[Source]) -> str:
    """The sources as the model sees them: ``[1] Title`` on its own line, then the text."""
    blocks = []
    for number, source in enumerate(sources, start=1):
        header = f"[{number}] {source.title}" if source.title else f"[{number}]"
        blocks.append(f"{header}\n{source.text.strip()}")
    return "\n\n".join(blocks)


def build_messages(
    question: str, sources: Sequence[Source], policy: Policy, instructions: str | None = None
) -> list[dict[str, str]]:
    """Chat messages: the instructions as the system turn, sources and question as the user turn."""
    system = instructions if instructions is not None else DEFAULT_INSTRUCTIONS[policy]
    user = f"Sources:\n\n{format_sources(sources)}\n\nQuestion: {question.strip()}"
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def render_prompt(messages: list[dict[str, str]], tokenizer: object) -> str:
    """Apply the tokenizer's chat template, or lay the turns out as a plain completion prompt."""
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(  # type: ignore[attr-defined, no-any-return]
            messages, tokenize=False, add_generation_prompt=True
        )
    system, user = messages[0]["content"], messages[1]["content"]
    return f"{system}\n\n{user}\nAnswer:\n"
