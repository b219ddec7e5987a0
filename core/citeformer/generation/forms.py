"""The keyword forms of a generator's calls, written once over its request forms.

A generator writes the request forms: ``answer`` and ``answer_stream`` (and ``answer_batch``,
``aanswer``, ``aanswer_stream`` where it has them), each taking a checked ``GenerationRequest``.
These bases add the keyword forms users call, each checking its arguments into a request
(``build_request``) before anything runs:

```text
CallForms       generate, stream                  -> answer, answer_stream
BatchCallForms  generate_batch                    -> answer_batch
AsyncCallForms  agenerate, astream                -> aanswer, aanswer_stream
```
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Generic, TypeVar

from citeformer.decoding.batching import build_requests, check_batch_size
from citeformer.request import DEFAULT_BATCH_SIZE, DEFAULT_POLICY, build_request

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from citeformer.request import GenerationOptions, GenerationRequest, SourceLike
    from citeformer.types import CitedAnswer, Policy

__all__ = ["AsyncCallForms", "BatchCallForms", "CallForms"]

StreamT = TypeVar("StreamT")
"""The stream type a generator's ``answer_stream`` (or ``aanswer_stream``) returns."""


class CallForms(Generic[StreamT]):
    """``generate`` and ``stream``, over the generator's ``answer`` and ``answer_stream``."""

    def answer(self, request: GenerationRequest) -> CitedAnswer:
        """The answer to a checked request (what ``generate`` runs)."""
        raise NotImplementedError

    def answer_stream(self, request: GenerationRequest) -> StreamT:
        """A stream of the answer to a checked request (what ``stream`` returns)."""
        raise NotImplementedError

    def generate(
        self,
        question: str,
        sources: Sequence[SourceLike],
        policy: Policy | str = DEFAULT_POLICY,
        **options: Unpack[GenerationOptions],
    ) -> CitedAnswer:
        """Answer ``question`` from ``sources``; markers are ``[k]`` with k in 1..len(sources).

        ``sources`` is a list of ``Source`` or plain strings. The options (``max_new_tokens``,
        ``do_sample``, ``temperature``, ``seed``, ``instructions``, ``prompt``, ``constrained``,
        ``evidence`` and the grammar options) are those of ``citeformer.GenerationOptions``;
        they are checked by ``build_request`` before anything runs.

        ``prompt`` replaces the whole prompt with text you rendered yourself (it must number the
        sources as the markers do). ``constrained=False`` drops the grammar, for comparisons
        only: the answer may then name sources that do not exist; its ``citations`` keep the
        markers in range, and ``scan_markers`` on its text counts the rest.

        Under ``QUOTES_ONLY`` every quote is verbatim: ``"text" [k]`` where source k contains
        ``text`` (white space runs in the source match one space); ``answer.quotes`` locates
        each. ``evidence`` chooses among the ids the grammar allows by how well each source
        supports the claim being cited (``"lexical"`` by default); it acts with the grammar only.
        """
        return self.answer(build_request(question, sources, policy, **options))

    def stream(
        self,
        question: str,
        sources: Sequence[SourceLike],
        policy: Policy | str = DEFAULT_POLICY,
        **options: Unpack[GenerationOptions],
    ) -> StreamT:
        """Like ``generate``, but an iterator of text chunks as the answer is generated.

        A marker is held back until its ``]`` arrives, so no chunk ends inside ``[12``; the
        chunks join to ``stream.answer.text``. Arguments are checked before this returns.
        """
        return self.answer_stream(build_request(question, sources, policy, **options))


class BatchCallForms:
    """``generate_batch``, over the generator's ``answer_batch``."""

    def answer_batch(
        self, requests: Sequence[GenerationRequest], *, batch_size: int = DEFAULT_BATCH_SIZE
    ) -> list[CitedAnswer]:
        """The answers to many checked requests, in their order, ``batch_size`` at once."""
        raise NotImplementedError

    def generate_batch(
        self,
        questions: Sequence[str],
        sources: Sequence[Sequence[SourceLike]],
        policy: Policy | str = DEFAULT_POLICY,
        *,
        batch_size: int | None = None,
        **options: Unpack[GenerationOptions],
    ) -> list[CitedAnswer]:
        """Answer ``questions[i]`` from ``sources[i]`` for every i, decoded together.

        The options are those of ``generate`` and apply to every row; ``answer_batch`` takes
        requests that differ in them. ``batch_size``: rows decoded at once, where the
        generator takes it (``None``: its default). All rows are checked first: one
        ``InvalidInputError`` names every row ``generate`` would refuse, and nothing runs.
        """
        if batch_size is None:
            return self.answer_batch(build_requests(questions, sources, policy, options))
        size = check_batch_size(batch_size)
        requests = build_requests(questions, sources, policy, options)
        return self.answer_batch(requests, batch_size=size)


class AsyncCallForms(Generic[StreamT]):
    """``agenerate`` and ``astream``, over the generator's ``aanswer`` and ``aanswer_stream``."""

    async def aanswer(self, request: GenerationRequest) -> CitedAnswer:
        """Async ``answer``."""
        raise NotImplementedError

    def aanswer_stream(self, request: GenerationRequest) -> StreamT:
        """Async ``answer_stream``."""
        raise NotImplementedError

    async def agenerate(
        self,
        question: str,
        sources: Sequence[SourceLike],
        policy: Policy | str = DEFAULT_POLICY,
        **options: Unpack[GenerationOptions],
    ) -> CitedAnswer:
        """Async ``generate``."""
        return await self.aanswer(build_request(question, sources, policy, **options))

    def astream(
        self,
        question: str,
        sources: Sequence[SourceLike],
        policy: Policy | str = DEFAULT_POLICY,
        **options: Unpack[GenerationOptions],
    ) -> StreamT:
        """Async ``stream``: ``async for chunk in gen.astream(...)``, then ``.answer``."""
        return self.aanswer_stream(build_request(question, sources, policy, **options))
