"""A copy of the seeded tiny Qwen3 model that opens a tool call as its answer: the turn-ending
copy (:mod:`tests.helpers.turn_model`) with one more flag dimension, so that Qwen3's hermes call
marker ``<tool_call>`` is the answer's first token with probability :data:`CALL_FIRST` at
temperature 1. What follows the marker is whatever the copy samples: a constraint (strict
tools, a forced call) decides the call, and without one it is not a call.

The weights, on top of the turn-ending copy's (its flag ``_D``, ``FLAG``, ``END_WEIGHT``):

- Hidden dimension ``_CALL_D`` is a second flag: the tokens that end a generation prompt
  (``"\\n"`` after ``<|im_start|>assistant``, ``"\\n\\n"`` after the empty think block of
  thinking off) hold ``FLAG`` there, every other token 0. Those tokens show no text, so their
  ``_D`` is 0 already: after one of them ``_CALL_D`` alone dwarfs the residual stream. No layer
  reads it (its RMSNorm weight is 0 in every layer) or writes it (its row of ``o_proj`` and
  ``down_proj`` is 0); the final norm's weight there is 1.
- In the output head's column ``_CALL_D`` the ``<tool_call>`` row is :data:`CALL_WEIGHT`, the
  rows of the other control, added and unused tokens (``<|im_end|>``, ``<think>``, ...)
  ``-CALL_WEIGHT``, the 151,643 ordinary tokens 0.
- After a prompt's last token the final RMSNorm leaves ``sqrt(hidden)`` in ``_CALL_D`` and ~0
  elsewhere: ``<tool_call>`` has logit ``CALL_WEIGHT * sqrt(hidden)``, the ordinary tokens ~0,
  the control tokens minus that. The answer opens a call with probability :data:`CALL_FIRST`,
  starts as ordinary text otherwise (uniformly), and never ends at once (~4e-15).
- Everywhere else the copy is the turn-ending one: after a token that shows text (the marker
  included) ``<|im_end|>`` has probability ``END_PER_STEP`` (0.2), the ordinary tokens share
  the rest uniformly, and a marker (``<tool_call>``, ``</tool_call>``, a head row of
  ``-END_WEIGHT``) is ~1e-10. So after an unconstrained marker come a few random tokens (4 on
  average) and the end: never the JSON a call needs. Under a constraint the mask picks the
  allowed ids and the copy samples among them (~uniformly after a token that shows text), and
  once the call is complete the turn ends at ``END_PER_STEP`` per step again. A ``"\\n"``
  inside an answer makes ``<tool_call>`` likely too (it is where a Hermes call starts), but a
  step after text samples a lone ``"\\n"`` with probability ~5e-6.
"""

from __future__ import annotations

import math
from pathlib import Path

from tests.helpers.turn_model import FLAG, write_turn_ending_copy

__all__ = ["CALL", "CALL_FIRST", "CALL_WEIGHT", "write_calling_copy"]

CALL = "<tool_call>"  # Qwen3's hermes call marker (an added token that is not special: id 151657)
CALL_FIRST = 0.99  # the marker's probability as the answer's first token
_HIDDEN = 128
_ORDINARY = 151643  # the tokenizer's ordinary ids; the rest are control, added or unused
# exp(CALL_WEIGHT * sqrt(hidden)) = p / (1 - p) * the ordinary ids (each exp(~0))
CALL_WEIGHT = math.log(CALL_FIRST / (1 - CALL_FIRST) * _ORDINARY) / math.sqrt(_HIDDEN)
_CALL_D = _HIDDEN - 2  # the call flag's hidden dimension (the turn-ending copy's is the last)
_PROMPT_ENDS = ("\n", "\n\n")  # the last token of Qwen3's generation prompt, thinking on / off
_WEIGHTS = "model.safetensors"


def write_calling_copy(source: Path, out: Path, *, max_new_tokens: int) -> Path:
    """Write the copy of the tiny model ``source`` that opens a call and ends its turns into
    the new directory ``out`` (its tokenizer files linked) and return ``out``."""
    import numpy as np
    from safetensors.numpy import load_file, save_file
    from tokenizers import Tokenizer

    write_turn_ending_copy(source, out, max_new_tokens=max_new_tokens)
    tokenizer = Tokenizer.from_file(str(source / "tokenizer.json"))
    call_id = tokenizer.token_to_id(CALL)
    prompt_ends = [tokenizer.encode(text).ids for text in _PROMPT_ENDS]
    if call_id is None or call_id < _ORDINARY or any(len(ids) != 1 for ids in prompt_ends):
        raise ValueError(f"{source}: no {CALL} added token or one-token prompt ends")
    weights = load_file(str(out / _WEIGHTS))
    embedding = weights["model.embed_tokens.weight"]
    head = weights["lm_head.weight"]  # untied by the turn-ending copy
    if np.any(embedding[[ids[0] for ids in prompt_ends], _HIDDEN - 1] != 0.0):
        raise ValueError(f"{source}: a generation prompt's last token carries the end flag")
    embedding[:, _CALL_D] = 0.0
    embedding[[ids[0] for ids in prompt_ends], _CALL_D] = FLAG
    head[:, _CALL_D] = 0.0
    head[_ORDINARY:, _CALL_D] = -CALL_WEIGHT
    head[call_id, _CALL_D] = CALL_WEIGHT
    for name, value in weights.items():
        if name.endswith(("input_layernorm.weight", "post_attention_layernorm.weight")):
            value[_CALL_D] = 0.0
        elif name.endswith(("self_attn.o_proj.weight", "mlp.down_proj.weight")):
            value[_CALL_D, :] = 0.0
    weights["model.norm.weight"][_CALL_D] = 1.0
    save_file({k: np.ascontiguousarray(v) for k, v in weights.items()}, str(out / _WEIGHTS),
              metadata={"format": "pt"})
    return out
