"""Conversations: the standalone question of a follow-up, and the history-aware citation chain.

``CitationRunnable.conversational(retriever)`` builds the chain; it takes the turns so far as
``"chat_history"``, and the application keeps them: in a list, or by LangGraph's persistence
(docs/chat.md):

```python
chain = CitationRunnable.conversational(retriever, llm=pipeline_llm)
history = []
for question in ["Tell me about the Eiffel Tower.", "When was it finished?"]:
    answer = chain.invoke({"question": question, "chat_history": history})["answer"]
    history += [("user", question), ("assistant", answer)]
```
"""

from __future__ import annotations

from collections.abc import Mapping
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from langchain_core.callbacks import AsyncCallbackManagerForChainRun, CallbackManagerForChainRun
from langchain_core.runnables import (
    Runnable,
    RunnableConfig,
    RunnableLambda,
    RunnablePassthrough,
)
from pydantic import Field
from typing_extensions import override

from citeformer.conversation import (
    DEFAULT_CONDENSE_TOKENS,
    condense_messages,
    free_text_request,
    standalone_question,
)
from citeformer.errors import InputTypeError, InvalidInputError, shown
from citeformer.request import check_question
from citeformer_langchain.answer import CitationAnswer
from citeformer_langchain.inputs import QUESTION_KEYS, read_history
from citeformer_langchain.models import GeneratorStep
from citeformer_langchain.tracing import AsyncModelRun, ModelRun

if TYPE_CHECKING:
    from langchain_core.retrievers import RetrieverLike

__all__ = ["StandaloneQuestion", "conversational_chain"]


class StandaloneQuestion(GeneratorStep[dict[str, Any], str]):
    """Rewrites a follow-up into a question that stands on its own, for the retriever.

    "When was it finished?" after a turn about the Eiffel Tower retrieves nothing useful; the
    model rewrites it as "When was the Eiffel Tower finished?". The input is the dict a
    ``CitationRunnable`` takes: the question under ``"question"`` (or ``"input"``), the earlier
    turns under ``"chat_history"`` (or ``"history"``). The output is the question: the first line
    of what the model wrote, or the follow-up as asked when the history is empty (no generation)
    or the model wrote nothing. It is the step ``create_history_aware_retriever`` runs, on the
    same model as the answer: free text, without the citation grammar (``constrained=False``), on
    a small prompt with one worked example, at most ``max_new_tokens`` tokens.

    Instantiate:
        ```python
        from citeformer_langchain import StandaloneQuestion

        condense = StandaloneQuestion()               # the embedded model
        condense = StandaloneQuestion(llm=HuggingFacePipeline(pipeline=pipe))
        condense = StandaloneQuestion(generator=FakeGenerator("When was it built?"))
        ```

    Invoke:
        ```python
        condense.invoke({"question": "When was it finished?",
                         "chat_history": [HumanMessage("Tell me about the Eiffel Tower."),
                                          AIMessage("It is a tower in Paris [1].")]})
        # 'When was the Eiffel Tower finished?'
        retriever_step = condense | retriever         # a history-aware retriever
        ```
    """

    max_new_tokens: int = Field(default=DEFAULT_CONDENSE_TOKENS, gt=0)
    """Most tokens of the standalone question."""

    @override
    def invoke(
        self, input: dict[str, Any], config: RunnableConfig | None = None, **kwargs: Any
    ) -> str:
        return self._call_with_config(self._condense, input, config, run_type="chain")

    @override
    async def ainvoke(
        self, input: dict[str, Any], config: RunnableConfig | None = None, **kwargs: Any
    ) -> str:
        return await self._acall_with_config(self._acondense, input, config, run_type="chain")

    def _condense(self, input: Any, run_manager: CallbackManagerForChainRun) -> str:
        question, history = _read(input)
        if not history:
            return question  # nothing to resolve: no model call
        generator = self._generator()
        request = free_text_request(
            generator, condense_messages(history, question), max_new_tokens=self.max_new_tokens
        )
        with ModelRun.start(run_manager, self._traced(generator), request) as run:
            answer = generator.answer(request)
            run.ended(answer)
        return standalone_question(answer.text, question)

    async def _acondense(self, input: Any, run_manager: AsyncCallbackManagerForChainRun) -> str:
        question, history = _read(input)
        if not history:
            return question
        answering = await self._answering()
        request = free_text_request(
            answering.generator, condense_messages(history, question),
            max_new_tokens=self.max_new_tokens,
        )
        async with await AsyncModelRun.start(
            run_manager, self._traced(answering.generator), request
        ) as run:
            answer = await answering.answer(request)
            await run.ended(answer)
        return standalone_question(answer.text, question)


def conversational_chain(
    cite: GeneratorStep[dict[str, Any], CitationAnswer],
    retriever: RetrieverLike,
    *,
    condense_tokens: int = DEFAULT_CONDENSE_TOKENS,
) -> Runnable[dict[str, Any], dict[str, Any]]:
    """Condense -> retrieve -> cite, on ``cite``'s generator (see
    ``CitationRunnable.conversational``)."""
    condense_step = StandaloneQuestion(
        generator=cite.resolved_generator, max_new_tokens=condense_tokens
    )
    chain = (
        RunnableLambda(_conversation_input, name="conversation_input")
        | RunnablePassthrough.assign(standalone_question=condense_step)
        | RunnablePassthrough.assign(context=itemgetter("standalone_question") | retriever)
        | RunnablePassthrough.assign(cited_answer=cite)
        | RunnablePassthrough.assign(answer=RunnableLambda(_answer_text, name="answer_text"))
    )
    return chain.with_config(run_name="conversational_citation_chain")


def _conversation_input(value: object) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise InputTypeError(
            "the conversational chain takes a dict {'question': str, 'chat_history': [...]}, "
            f"got {type(value).__name__} {shown(value)}; for a plain question string, put "
            "{'question': RunnablePassthrough()} before it"
        )
    return dict(value)


def _answer_text(value: dict[str, Any]) -> str:
    answer: CitationAnswer = value["cited_answer"]
    return answer.text


def _read(value: object) -> tuple[str, list[tuple[str, str]]]:
    if not isinstance(value, Mapping):
        raise InputTypeError(
            f"StandaloneQuestion takes a dict with the question under 'question' (or 'input') "
            f"and the earlier turns under 'chat_history', got {type(value).__name__}"
        )
    key = next((k for k in QUESTION_KEYS if k in value), None)
    if key is None:
        raise InvalidInputError(
            f"the input has no 'question' (or 'input') key; it has {sorted(map(str, value))}"
        )
    return check_question(value[key]), read_history(value)
