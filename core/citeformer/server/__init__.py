"""Cited answers from a model served over an OpenAI-compatible HTTP API, its grammar enforced there.

``ServerGenerator`` builds the same prompt and the same GBNF grammar as ``CiteGenerator`` and sends
the grammar with each request in the field the serving engine reads (``ENGINES``); the engine's
own grammar backend masks every token. The answer is then parsed again here, against that very
grammar, and its markers and quotes checked: a server that ignored the grammar raises
``ServerIgnoredGrammarError`` instead of reaching the user.

The modules behind it:

```text
_engines     the request body each engine reads, grammar included
_transport   one server: address and credentials, retries, Retry-After, the deadline
_errors      what a server said instead of answering, worded; passwords hidden
_sse         server-sent events, parsed as they arrive
_recheck     the answer re-parsed against the grammar that was sent (xgrammar)
_assemble    completion bodies and events to a checked CitedAnswer; their errors
_streams     ServerAnswerStream, AsyncServerAnswerStream
_handshake   whether a vLLM runs citeformer's steering processor, asked once
_generator   ServerGenerator
```
"""

from citeformer.server._engines import ENGINES, Engine
from citeformer.server._generator import ServerGenerator
from citeformer.server._streams import AsyncServerAnswerStream, ServerAnswerStream

__all__ = [
    "ENGINES",
    "AsyncServerAnswerStream",
    "Engine",
    "ServerAnswerStream",
    "ServerGenerator",
]
