"""Model configs and the context length vLLM 0.32 derives for each (no ``--max-model-len``):
shared by the unit test of ``textproc.service.context_length`` and its check against vLLM."""

from __future__ import annotations

from typing import Any

__all__ = ["CASES", "LLAMA"]

LLAMA = {"model_type": "llama", "hidden_size": 128, "num_attention_heads": 2}
CASES: list[tuple[str, dict[str, Any], int]] = [
    ("plain", {"model_type": "qwen3", "max_position_embeddings": 4096}, 4096),
    ("smallest-key", {"model_type": "qwen3", "max_position_embeddings": 8192, "seq_length": 3000}, 3000),
    ("model_max_length-overrides", {"model_type": "cohere", "max_position_embeddings": 8192,
                                    "model_max_length": 131072}, 131072),
    ("gpt2-n_positions", {"model_type": "gpt2", "n_positions": 1024}, 1024),
    ("linear-factor", {**LLAMA, "max_position_embeddings": 4096,
                       "rope_parameters": {"rope_type": "linear", "factor": 2.0}}, 8192),
    ("legacy-rope_scaling-type", {**LLAMA, "max_position_embeddings": 2048,
                                  "rope_scaling": {"type": "dynamic", "factor": 2.0}}, 4096),
    ("yarn-already-scaled", {"model_type": "qwen3", "max_position_embeddings": 4096,
                             "rope_parameters": {"rope_type": "yarn", "factor": 4.0,
                                                 "original_max_position_embeddings": 1024}}, 4096),
    ("llama3-already-scaled", {**LLAMA, "max_position_embeddings": 131072, "rope_scaling": {
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192}}, 131072),
    ("longrope-original", {"model_type": "phi3", "hidden_size": 128, "num_attention_heads": 2,
                           "max_position_embeddings": 131072,
                           "original_max_position_embeddings": 4096,
                           "rope_scaling": {"type": "longrope", "short_factor": [1.0] * 32,
                                            "long_factor": [2.0] * 32}}, 4096),
    ("gemma3-no-factor", {"model_type": "gemma3_text", "max_position_embeddings": 32768,
                          "rope_scaling": {"rope_type": "linear", "factor": 8.0}}, 32768),
    ("nested-per-layer-type", {"model_type": "qwen3", "max_position_embeddings": 4096,
                               "rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 2.0},
                                                   "sliding_attention": {"rope_type": "default"}}}, 8192),
    ("null-factor", {**LLAMA, "max_position_embeddings": 4096,
                     "rope_scaling": {"rope_type": "linear", "factor": None}}, 4096),
    ("family-default-llama", dict(LLAMA), 2048),
    ("family-default-qwen3", {"model_type": "qwen3"}, 32768),
    # (vLLM's fallback; transformers loads no config of an unknown family, so vLLM itself
    # refuses one without trust_remote_code)
    ("unknown-family", {"model_type": "something_new"}, 2048),
    ("multimodal-text_config", {"model_type": "qwen2_5_vl", "max_position_embeddings": 128000,
                                "text_config": {"model_type": "qwen2_5_vl_text",
                                                "max_position_embeddings": 32768}}, 32768),
]
