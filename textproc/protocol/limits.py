"""The default limits and finish reasons of the wire, written once.

They change with policy (what a request may ask for), not with the shape of a frame.
"""

from __future__ import annotations

# a request's own limits are written beside its options (textproc.options) and shown here
from textproc.options import (
    LOGIT_BIAS_RANGE,
    MAX_CHOICES,
    MAX_LOGIT_BIAS,
    MAX_STOP_STRINGS,
    MAX_TOP_LOGPROBS,
)

__all__ = [
    "MAX_FRAME_BYTES",
    "ENGINE_FINISH_REASONS",
    "FINISH_REASONS",
    "DEFAULT_HWM",
    "MAX_CHOICES",
    "MAX_STOP_STRINGS",
    "MAX_JSON_DEPTH",
    "MAX_MODEL_LEN",
    "MAX_TOKEN_ID",
    "MAX_LOGIT_BIAS",
    "LOGIT_BIAS_RANGE",
    "MAX_TOP_LOGPROBS",
]

# Default limits, written once: config.py's settings, the HTTP frontend and clients import them.
MAX_FRAME_BYTES = 64 * 1024 * 1024  # zmq MAXMSGSIZE on every receiving socket
# how an engine may end a request: a stop token / EOS, max_tokens, an abort, an engine failure
ENGINE_FINISH_REASONS = frozenset({"stop", "length", "abort", "error"})
# what a client sees: the engine's reasons, plus "tool_calls" (a stop after the output made a
# tool call; the text core decides it, see textproc.core.pipeline.OutputPipeline.finish)
FINISH_REASONS = ENGINE_FINISH_REASONS | {"tool_calls"}
DEFAULT_HWM = 100_000  # ZeroMQ send/receive high-water mark, in messages
MAX_JSON_DEPTH = 64  # nesting of any JSON value a client sends (a request body, counted from it)
MAX_MODEL_LEN = 1 << 30  # the largest max_model_len (and so max_tokens) a service accepts
MAX_TOKEN_ID = 2**32 - 1  # what pack_ids (uint32) holds; the vocabulary bounds ids further
