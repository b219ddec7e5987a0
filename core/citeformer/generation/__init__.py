"""What a generator is to its callers: what it takes, and how a coroutine asks it.

The modules:

```text
protocols   AnswerGenerator, AsyncAnswerGenerator and their streams: what callers need
inputs      the checks of a question, its sources and earlier turns
forms       generate, stream and their batch and async twins, written once over the requests
aio         as_async: a generator's coroutines where it has them, its sync calls in a thread
```
"""

__all__: list[str] = []
