"""The default limits and finish reasons of the wire, written once.

They change with policy (what a request may ask for), not with the shape of a frame.
"""

from __future__ import annotations

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
MAX_CHOICES = 128  # n per request: one prompt, this many engine requests at most
MAX_STOP_STRINGS = 64  # stop strings per request (OpenAI allows 4; each costs per-step work;
# the text core takes up to textproc.core.stops.MAX_STOPS, and its MAX_STOP_CHARS per string)
MAX_JSON_DEPTH = 64  # nesting of any JSON value a client sends (a request body, counted from it)
MAX_MODEL_LEN = 1 << 30  # the largest max_model_len (and so max_tokens) a service accepts
MAX_TOKEN_ID = 2**32 - 1  # what pack_ids (uint32) holds; the vocabulary bounds ids further
MAX_LOGIT_BIAS = 1024  # entries of one request's logit_bias
LOGIT_BIAS_RANGE = (-100.0, 100.0)  # OpenAI's: -100 bans a token, 100 forces it
MAX_TOP_LOGPROBS = 20  # alternatives per token a request may ask for (OpenAI's top_logprobs limit)
