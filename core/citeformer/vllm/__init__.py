"""citeformer's steering inside vLLM: a logits processor for its server, and ``VLLMGenerator``.

``SteeringProcessor`` runs the steering core (``citeformer.decoding.steering``) on every request
that carries citeformer's payload (``vllm_xargs={"citeformer": ...}``, what ``ServerGenerator``
and ``VLLMGenerator`` send): the request's own grammar, its verbatim quote guard, the evidence
lever and every readability lever of the in-process default. Requests without the payload pass
through untouched. Load it in a server:

```bash
python -m vllm.entrypoints.openai.api_server --model MODEL \
    --logits-processors citeformer.vllm:SteeringProcessor
```

or offline, ``vllm.LLM(MODEL, logits_processors=[SteeringProcessor])`` (``VLLMGenerator`` does).
Install citeformer into vLLM's environment without its dependencies, which vLLM already has:
``pip install --no-deps PATH_OR_URL_OF_CITEFORMER``.

How the guarantee and the steering share the work. vLLM applies a request's structured-output
grammar before any custom processor (``vllm/v1/worker/gpu_model_runner.py``, ``sample_tokens``:
``apply_grammar_bitmask`` before ``Sampler.forward``), which would leave the processor no trace
of what the model wanted where the grammar said no: the end-intent lever moves exactly that
probability. So a steered request carries the markers' grammar alone
(``citeformer.grammar.marker_grammar``: any text without brackets, markers in 1..N), enforced by
vLLM, and the processor enforces the request's whole grammar itself with xgrammar, as
``CiteGenerator`` does. Without the processor, vLLM still keeps every marker in range; a
``ServerGenerator`` asks once whether the processor is there (``HANDSHAKE``) and otherwise sends
the whole grammar as structured output instead, unsteered.

Both of vLLM 0.32's processor interfaces are implemented by the one class: Model Runner V1's
(``vllm/v1/sample/logits_processor/interface.py``: ``update_state(BatchUpdate)``,
``apply(logits)``; what the CPU build runs) and Model Runner V2's
(``vllm/v1/worker/gpu/sample/logits_processor/interface.py``: ``add_request``,
``apply(logits, ctx)``); each loader checks for its own base class. A processor error must never
reach vLLM, which would end the engine: a request whose steering fails is logged and ended (its
logits keep only the end-of-answer tokens); the other requests go on.

Nothing slow on the engine loop. A request's grammar compiles for seconds at the corner of the
grammar bounds (3.3 s for 300 sources, ``max_group=10``, the widest words, on SmolLM2's
vocabulary), and every request in the batch would wait for it. So, as vLLM's own structured
outputs do (``vllm/v1/structured_output/__init__.py``: ``grammar_init`` submits
``_create_grammar`` to a thread pool, and the scheduler holds the request in
``WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR`` until it is done), the payload is read and the
grammar compiled in a thread pool (``_prepare``) as soon as vLLM adds the request; its prefill,
chunked over steps for a long prompt, hides much of it. A logits processor cannot hold a request
in vLLM's scheduler, so a request whose steering is not ready by a step gets, at that step:

- its grammar's check, once compiled (the same grammar the client re-checks the answer against,
  compiled without a vocabulary: 0.3 s at that corner, against 3.3): its row keeps only those
  of its ``CANDIDATES`` likeliest tokens (short punctuation tokens, then ``MORE_CANDIDATES``,
  when none of them fits) that the
  grammar accepts after the answer so far, so every token it writes meanwhile is one the full
  steering accepts (no levers yet);
- before that, a wait for the check of at most ``WAIT_S`` for the whole step; still not ready,
  its row is left as vLLM gave it: vLLM's markers' grammar keeps every marker in 1..N.

When the steering is ready it is advanced through the answer written so far and steers from the
next step on. Where it cannot take that answer (a token written before even the check was
ready), the request is left to vLLM's markers' grammar, and the client's re-check reports it.
The other requests' steps are delayed by another request's preparation at most ``WAIT_S`` plus
the check of its candidates (about 0.2 ms a row), and whatever part of xgrammar's compile holds
Python's lock (tens of ms at the corner, as in vLLM's own pool).

The modules behind it:

```text
_rows        a steered request's state; what each step does with the steered rows: their
             steering taken once prepared and advanced, their check while they wait, an end
_processor   SteeringProcessor: vLLM's two processor interfaces, the payload, the compile pool
_generator   VLLMGenerator: vllm.LLM in this process, the processor loaded
```
"""

from citeformer.vllm._generator import VLLMGenerator
from citeformer.vllm._processor import SteeringProcessor

__all__ = ["SteeringProcessor", "VLLMGenerator"]
