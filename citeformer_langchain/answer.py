"""The LangChain-side answer: citeformer's ``CitedAnswer`` with ``Document``s for Sources.

``CitationAnswer`` is an ``AIMessage`` (its ``content`` is the answer's text) and its streaming
twin ``CitationAnswerChunk`` an ``AIMessageChunk``, so the runnable's output goes on as a chat
model's does: into ``StrOutputParser`` (the text), a chat history, a message list. What a chat
model would put in ``response_metadata`` and ``usage_metadata`` is there (the finish reason, the
token counts); the citations, documents and quotes are fields of their own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Literal, cast

from langchain_core.documents import Document
from langchain_core.messages import AIMessage, AIMessageChunk
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr
from typing_extensions import Self

from citeformer.answers import unshown_text
from citeformer.errors import InvalidInputError
from citeformer.types import (
    Citation,
    CitedAnswer,
    EvidenceSpan,
    FinishReason,
    Quote,
    RefusalCheck,
)
from citeformer_langchain.inputs import to_sources

__all__ = ["CitationAnswer", "CitationAnswerChunk", "DocumentCitation", "DocumentQuote"]


class DocumentCitation(BaseModel):
    """One ``[N]`` marker of an answer and the ``Document`` it points at."""

    model_config = ConfigDict(frozen=True)

    source_id: int = Field(ge=1)
    """1-based index into the documents passed with the question: ``[2]`` is ``documents[1]``."""

    start: int = Field(ge=0)
    """Offset of the marker's ``[`` in the full answer text."""

    end: int = Field(ge=1)
    """Offset just past the marker's ``]``: ``text[start:end] == f"[{source_id}]"``."""

    document: Document
    """The document the marker points at (the very object that was passed in)."""

    evidence: EvidenceSpan | None = None
    """The sentence or two of ``document.page_content`` that best support the claim this marker
    ends (``source_start``/``source_end`` index the page content); ``None`` when not computed."""


class DocumentQuote(BaseModel):
    """One verbatim quote ``"text" [N]`` of an answer and where ``document`` holds that text.

    ``document.page_content[source_start:source_end]`` is the quoted text as the document writes
    it (one space in the quote may stand for a run of white space there).
    """

    model_config = ConfigDict(frozen=True)

    text: str
    """The quoted text, without its quote marks."""

    source_id: int = Field(ge=1)
    """1-based index of the document the quote's marker names."""

    start: int = Field(ge=0)
    """Offset of the quoted text in the full answer text."""

    end: int = Field(ge=1)
    """Offset just past the quoted text in the answer."""

    source_start: int = Field(ge=0)
    """Offset in ``document.page_content`` where the quoted text begins."""

    source_end: int = Field(ge=1)
    """Offset in ``document.page_content`` just past the quoted text."""

    document: Document
    """The document the quote comes from (the very object that was passed in)."""


class CitationAnswer(AIMessage):
    """An answer whose every ``[N]`` marker points at one of ``documents``: an ``AIMessage``.

    ``content`` (and ``text``, and ``str(answer)``) is the answer as generated, markers
    included; ``CitationAnswer(text=...)`` sets it. ``citations`` are in order of appearance;
    ``citations[i].document`` is ``documents[citations[i].source_id - 1]``. ``documents`` are
    the documents the model was shown: those passed in, in order, without any left out for
    having a blank ``page_content``. ``response_metadata`` holds ``finish_reason`` and
    ``usage_metadata`` the token counts, as a chat model's message does. ``to_dict()`` gives a
    plain dict for JSON, ``cited_answer`` the core answer it stands for.
    """

    citations: list[DocumentCitation] = Field(default_factory=list)
    """Every marker in ``text``, in order of appearance."""

    documents: list[Document] = Field(default_factory=list)
    """The documents the question was answered from, in the order they were passed; ``[N]`` is
    ``documents[N - 1]``. A document left out for a blank ``page_content`` is not among them."""

    quotes: list[DocumentQuote] = Field(default_factory=list)
    """Every verbatim quote (``QUOTES_ONLY`` policy), located in its document."""

    finish_reason: Literal["stop", "length"] | None = None
    """``"stop"``: the model ended the answer; ``"length"``: ``max_new_tokens`` ran out first.
    ``None`` only on a streamed chunk that is not the last one."""

    prompt_tokens: int = 0
    """Number of tokens in the prompt the model saw."""

    generated_tokens: int = 0
    """Number of tokens generated, the end-of-sequence token included."""

    abstained: bool = False
    """Whether the answer is the refusal sentence: the documents do not answer the question
    (the runnable's ``refusal``); it then cites nothing."""

    refusal: dict[str, Any] | None = None
    """How the documents' support of the question was weighed before generating, and why the
    answer is, or is not, the refusal sentence: ``CitedAnswer.to_dict()``'s ``"refusal"``
    (``measure``, ``support``, ``threshold``, ``offer_below``, ``band``, ``reason``; see
    ``citeformer.RefusalCheck``). ``None`` with the runnable's ``refusal=None``."""

    _cited: CitedAnswer | None = PrivateAttr(default=None)

    def __init__(self, text: str = "", **kwargs: Any) -> None:
        kwargs.setdefault("content", text)
        if kwargs.get("finish_reason") is not None:
            kwargs.setdefault("response_metadata", {"finish_reason": kwargs["finish_reason"]})
        if kwargs.get("prompt_tokens") or kwargs.get("generated_tokens"):
            prompt, generated = kwargs.get("prompt_tokens", 0), kwargs.get("generated_tokens", 0)
            kwargs.setdefault("usage_metadata", {
                "input_tokens": prompt, "output_tokens": generated,
                "total_tokens": prompt + generated,
            })
        super().__init__(**kwargs)

    def __str__(self) -> str:
        return self.text

    @classmethod
    def from_cited_answer(
        cls, answer: CitedAnswer, documents: Sequence[Document]
    ) -> Self:
        """Pair a core ``CitedAnswer`` with the documents its sources were made from, in order;
        the answer is kept, as ``cited_answer``."""
        documents = list(documents)
        if len(documents) != len(answer.sources):
            # A mismatch would make source_id point at the wrong Document: refuse rather than guess.
            raise InvalidInputError(
                f"the answer has {len(answer.sources)} sources but {len(documents)} documents "
                "were given; pass exactly the documents the sources were built from"
            )
        citations = [
            DocumentCitation(
                source_id=c.source_id, start=c.start, end=c.end,
                document=documents[c.source_id - 1], evidence=c.evidence,
            )
            for c in answer.citations
        ]
        quotes = [
            DocumentQuote(
                text=q.text, source_id=q.source_id, start=q.start, end=q.end,
                source_start=q.source_start, source_end=q.source_end,
                document=documents[q.source_id - 1],
            )
            for q in answer.quotes
        ]
        paired = cls(
            text=answer.text,
            citations=citations,
            documents=documents,
            quotes=quotes,
            finish_reason=answer.finish_reason,
            prompt_tokens=answer.prompt_tokens,
            generated_tokens=answer.generated_tokens,
            abstained=answer.abstained,
            refusal=None if answer.refusal is None else dataclasses.asdict(answer.refusal),
        )
        paired._cited = answer
        return paired

    @property
    def cited_answer(self) -> CitedAnswer:
        """The core answer this one stands for; its sources are what the model was shown.

        It is the very answer this one was made from (titles read with the runnable's
        ``title_keys``). A streamed chunk that is not the last one, or an answer built by hand,
        has none: its fields are made into one, titled by the default keys.
        """
        text = str(self.text)
        if self._cited is not None and self._cited.text == text:
            return self._cited
        return CitedAnswer(
            text=text,
            citations=tuple(
                Citation(c.source_id, c.start, c.end, c.evidence) for c in self.citations
            ),
            sources=tuple(to_sources(self.documents)),
            # None only on a streamed chunk that is not the last one.
            finish_reason=cast(FinishReason, self.finish_reason),
            prompt_tokens=self.prompt_tokens,
            generated_tokens=self.generated_tokens,
            quotes=tuple(
                Quote(q.text, q.source_id, q.start, q.end, q.source_start, q.source_end)
                for q in self.quotes
            ),
            abstained=self.abstained,
            refusal=None if self.refusal is None else RefusalCheck(**self.refusal),
        )

    @property
    def cited_ids(self) -> list[int]:
        """Distinct cited source ids, in order of first appearance."""
        return list(dict.fromkeys(c.source_id for c in self.citations))

    def _repr_markdown_(self) -> str:
        # Jupyter shows an answer rendered: linked markers, then its cited documents.
        from citeformer.render import to_markdown, unique_id_prefix

        return to_markdown(self.cited_answer, id_prefix=unique_id_prefix())

    def _repr_html_(self) -> str:
        from citeformer.render import to_html, unique_id_prefix

        return to_html(self.cited_answer, id_prefix=unique_id_prefix())

    @property
    def cited_documents(self) -> list[Document]:
        """Distinct cited documents, in order of first citation."""
        return [self.documents[i - 1] for i in self.cited_ids]

    def to_dict(self) -> dict[str, Any]:
        """A plain dict for JSON: ``CitedAnswer.to_dict()``'s keys, with ``"documents"`` (each
        once, numbered by ``source_id``, with its ``id``) in place of ``"sources"``.

        Document metadata is passed through as it is, so it is JSON-ready when the metadata is.
        """
        data = self.cited_answer.to_dict()
        del data["sources"]  # the documents below stand for them
        data["documents"] = [
            {
                "source_id": i, "id": d.id, "page_content": d.page_content,
                "metadata": dict(d.metadata),
            }
            for i, d in enumerate(self.documents, start=1)
        ]
        return data


class CitationAnswerChunk(CitationAnswer, AIMessageChunk):
    """A piece of a streamed ``CitationAnswer``, an ``AIMessageChunk``; chunks add up with ``+``.

    Every chunk but the last carries only ``text``. The last one carries the rest of the text
    (possibly ``""``), every citation and quote (offsets into the full text), the documents, the
    finish reason and the token counts. Adding all chunks in order gives the answer ``invoke``
    returns.
    """

    type: Literal["AIMessageChunk"] = "AIMessageChunk"

    @classmethod
    def last(cls, answer: CitedAnswer, documents: Sequence[Document], *, shown: str) -> Self:
        """The last chunk of a stream whose earlier chunks showed ``shown``: the citations,
        quotes, documents, finish reason and token counts, with the text not shown yet."""
        final = cls.from_cited_answer(answer, documents)
        return final.model_copy(update={"content": unshown_text(answer.text, shown)})

    def __add__(self, other: object) -> CitationAnswerChunk:  # type: ignore[override]
        if not isinstance(other, CitationAnswerChunk):
            return NotImplemented
        total = CitationAnswerChunk(
            content=str(self.text) + str(other.text),
            citations=[*self.citations, *other.citations],
            # Only the last chunk has these; a later chunk's values win.
            documents=other.documents or self.documents,
            quotes=[*self.quotes, *other.quotes],
            finish_reason=other.finish_reason or self.finish_reason,
            prompt_tokens=other.prompt_tokens or self.prompt_tokens,
            generated_tokens=other.generated_tokens or self.generated_tokens,
            abstained=other.abstained or self.abstained,
            refusal=other.refusal or self.refusal,
        )
        total._cited = other._cited or self._cited
        return total
