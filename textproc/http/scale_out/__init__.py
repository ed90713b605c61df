"""vLLM's scale-out API (``vllm serve --enable-scale-out``): render a request to token ids and
sampling params, generate from ids (``/inference/v1/generate``), derender ids to text, abort by
id.

``routes`` (the handlers over a ``serving.Serving``), ``bodies`` (render, generate and abort
bodies; vLLM's ``sampling_params`` <-> the request's options), ``answers`` (vLLM's
``GenerateRequest`` and generate answer shapes), ``events`` (a generate run's outputs -> the
answer, streamed and whole, and the aborts by id).
"""

from __future__ import annotations

__all__: list[str] = []
