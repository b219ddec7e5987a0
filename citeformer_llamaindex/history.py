"""A LlamaIndex chat history as the core's ``(role, text)`` turns, and a turn as messages."""

from __future__ import annotations

from collections.abc import Sequence

from llama_index.core.base.llms.types import ChatMessage, MessageRole

from citeformer.errors import InputTypeError
from citeformer.integration import history_turn

__all__ = ["to_messages", "to_turns"]


def to_turns(messages: object, where: str = "chat_history") -> list[tuple[str, str]]:
    """LlamaIndex ``ChatMessage``s as the core's ``(role, text)`` turns.

    User messages are ``"user"``; assistant (also ``CHATBOT``, ``MODEL``) messages
    ``"assistant"``. Raises ``InputTypeError`` for anything but a list of ``ChatMessage`` and
    ``InvalidInputError`` for a system or tool message or a message without text, naming it.
    """
    if isinstance(messages, (str, bytes, ChatMessage)) or not isinstance(messages, Sequence):
        raise InputTypeError(
            f"{where} must be a list of ChatMessage, got {type(messages).__name__}"
        )
    turns = []
    for index, message in enumerate(messages):
        if not isinstance(message, ChatMessage):
            raise InputTypeError(
                f"{where}[{index}] is a {type(message).__name__}, not a "
                "llama_index.core.llms.ChatMessage"
            )
        turns.append(history_turn(
            message.role.value, message.content, f"{where}[{index}]", noun="message",
            instructions_to="CitationSynthesizer",
        ))
    return turns


def to_messages(message: str, answer: str) -> list[ChatMessage]:
    """One turn, the user's message and the answer, as the messages a memory keeps."""
    return [
        ChatMessage(role=MessageRole.USER, content=message),
        ChatMessage(role=MessageRole.ASSISTANT, content=answer),
    ]
