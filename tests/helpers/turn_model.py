"""A copy of the seeded tiny Qwen3 model (``scripts/make_tiny_model.py``) that ends its turns by
itself: a real Qwen3 transformer whose weights make the chat template's end of turn
(``<|im_end|>``) come with a fixed probability per step, but (almost) never as the answer's first
token. The random source model never ends a turn, so an agent would only ever see answers cut off
at its output cap.

The weights (``numpy`` and ``safetensors``, both needed by ``transformers`` anyway; ~1 s):

- Hidden dimension ``_D`` is a flag: every token's input embedding holds ``FLAG`` there, except
  the tokens that show no text (whitespace, control tokens, unused rows), which hold 0. These
  include the ones that end a generation prompt (``"\\n"`` after ``<|im_start|>assistant``,
  ``"\\n\\n"`` after the empty think block of thinking off), and an answer never ends right
  after one of them: its last token shows text (its first may be ``<think>`` or ``<tool_call>``,
  ~1e-5, which make the rest reasoning or a call). No layer reads the flag (its weight in every
  layer's RMSNorm is 0) or writes it (its row of ``o_proj`` and ``down_proj`` is 0), so it
  reaches the final norm as the current token's flag.
- The output head is untied: the source embedding with column ``_D`` zeroed, except that the
  ``<|im_end|>`` row is ``END_WEIGHT`` in ``_D`` and 0 elsewhere, and the rows of the other
  control tokens and of the unused embedding rows are ``-END_WEIGHT`` there.
- ``FLAG`` dwarfs the rest of the residual stream, so after a flagged token the final RMSNorm
  leaves ``sqrt(hidden)`` in ``_D`` and ~0 elsewhere: ``<|im_end|>`` has logit
  ``END_WEIGHT * sqrt(hidden)``, the control tokens minus that, the 151,643 ordinary tokens ~0.
  At temperature 1 the end of turn then comes with probability :data:`END_PER_STEP` after every
  token that shows text, the other tokens uniformly. After a token that shows no text (a prompt's
  last, ``"\\n"``) the flag is 0 and the layers' output dominates the final norm (~170, as in
  the source): logits of a random model, log-sum-exp ~14.5, among which ``<|im_end|>``'s is 0:
  an answer that ends at once is ~5e-7.

The layers still run on every token (attention over the whole prompt, the MLPs); the flag
scales down what they read of a flagged token, and their share of the output after one.
``generation_config.json`` sets temperature 1.0 (the agents send none) and ``max_new_tokens``, the
``max_tokens`` of a request that sets none (Codex): an answer reaches it with probability about
``(1 - END_PER_STEP) ** (max_new_tokens - 1)`` (8e-7 for 64).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

__all__ = ["END_PER_STEP", "END_WEIGHT", "FLAG", "write_turn_ending_copy"]

FLAG = 1000.0  # after a flagged token the other dimensions' norm is < 40 (p99 8; the source's ~175)
END_PER_STEP = 0.2  # the end of turn's probability after a flagged token
_HIDDEN = 128
_ORDINARY = 151643  # the tokenizer's ordinary ids (0..151642); the rest are control or unused
# exp(END_WEIGHT * sqrt(hidden)) = q / (1 - q) * the ordinary ids (each exp(~0))
END_WEIGHT = math.log(END_PER_STEP / (1 - END_PER_STEP) * _ORDINARY) / math.sqrt(_HIDDEN)
_D = _HIDDEN - 1  # the flag's hidden dimension (any would do)
_END = "<|im_end|>"
_PROMPT_ENDS = ("\n", "\n\n")  # the last token of Qwen3's generation prompt, thinking on / off
_WEIGHTS = "model.safetensors"
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def write_turn_ending_copy(source: Path, out: Path, *, max_new_tokens: int) -> Path:
    """Write the copy of the tiny model ``source`` into the new directory ``out`` (its tokenizer
    files linked) and return ``out``."""
    import numpy as np
    from safetensors.numpy import load_file, save_file
    from tokenizers import Tokenizer

    config = json.loads((source / "config.json").read_text())
    tokenizer = Tokenizer.from_file(str(source / "tokenizer.json"))
    end_id = tokenizer.token_to_id(_END)
    prompt_ends = [tokenizer.encode(text).ids for text in _PROMPT_ENDS]
    if (config["hidden_size"] != _HIDDEN or tokenizer.get_vocab_size(with_added_tokens=False) != _ORDINARY
            or end_id is None or any(len(ids) != 1 for ids in prompt_ends)):
        raise ValueError(f"{source}: not the tiny Qwen3 model this copy is made for")
    weights = load_file(str(source / _WEIGHTS))
    embedding = weights["model.embed_tokens.weight"]
    head = embedding.copy()
    head[:, _D] = 0.0
    head[_ORDINARY:, _D] = -END_WEIGHT
    head[end_id, :] = 0.0
    head[end_id, _D] = END_WEIGHT
    embedding[:, _D] = FLAG
    texts = tokenizer.decode_batch([[i] for i in range(len(embedding))])  # control tokens: ""
    blank = [i for i, text in enumerate(texts) if not text.strip()]
    if not {ids[0] for ids in prompt_ends} <= set(blank):
        raise ValueError(f"{source}: a generation prompt's last token is not whitespace")
    embedding[blank, _D] = 0.0
    for i in range(config["num_hidden_layers"]):
        layer = f"model.layers.{i}."
        weights[layer + "input_layernorm.weight"][_D] = 0.0
        weights[layer + "post_attention_layernorm.weight"][_D] = 0.0
        weights[layer + "self_attn.o_proj.weight"][_D, :] = 0.0
        weights[layer + "mlp.down_proj.weight"][_D, :] = 0.0
    weights["model.norm.weight"][_D] = 1.0
    weights["lm_head.weight"] = head
    out.mkdir(parents=True)
    save_file({k: np.ascontiguousarray(v) for k, v in weights.items()}, str(out / _WEIGHTS),
              metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps({**config, "tie_word_embeddings": False}, indent=2))
    generation = json.loads((source / "generation_config.json").read_text())
    (out / "generation_config.json").write_text(json.dumps(
        {**generation, "temperature": 1.0, "max_new_tokens": max_new_tokens}, indent=2))
    for name in _TOKENIZER_FILES:
        (out / name).symlink_to((source / name).resolve())
    return out
