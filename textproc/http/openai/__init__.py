"""OpenAI's API: ``/v1/chat/completions``, ``/v1/completions``, ``/v1/models``, and vLLM's
``/tokenize`` and ``/detokenize``.

``routes`` (the handlers over a ``serving.Serving``), ``bodies`` (request body -> validated
parameters), ``structured`` (the structured-output fields -> one constraint spec), ``answers``
(the JSON sent back: objects, chunks, usage, logprobs, SSE framing), ``events`` (a run's outputs
-> the answer, streamed and whole). ``/v1/responses`` and Anthropic's ``/v1/messages`` are chat
requests underneath: their folders map their bodies onto ``bodies.chat_params``.
"""

from __future__ import annotations

__all__: list[str] = []
