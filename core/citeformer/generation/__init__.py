"""How callers ask a generator: from a coroutine without blocking the event loop.

The modules:

```text
aio   as_async: a generator's coroutines where it has them, its sync calls in a worker thread
```
"""

__all__: list[str] = []
