"""textproc's context length of a model (``textproc.service.context_length``) against vLLM's own
derivation, in the engine's environment: the tiny model through vLLM's whole ``ModelConfig``
(what ``vllm serve`` and ``engine_vllm`` run) and every synthetic config of
tests/helpers/context_lengths.py through vLLM's config loader and ``_get_and_verify_max_len``
(no model registry lookup per family). One interpreter start (~15 s: vLLM's import).
Skips, naming the setup command, where the engine environment is not installed.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.helpers.real_engine import TINY_MODEL, VLLM_PYTHON, missing
from tests.helpers.context_lengths import CASES
from textproc.service.context_length import model_context_length

pytestmark = [pytest.mark.timeout(300),
              pytest.mark.skipif(missing() is not None, reason=str(missing()))]

# model dirs as argv; prints {dir: max_model_len or an error}
VLLM_SIDE = r"""
import json, sys
import vllm.config  # (before the convertor module: vLLM's own import order)
from vllm.config.model import _get_and_verify_max_len
from vllm.engine.arg_utils import EngineArgs
from vllm.transformers_utils.config import get_config, get_hf_text_config
from vllm.transformers_utils.model_arch_config_convertor import (
    MODEL_ARCH_CONFIG_CONVERTORS, ModelArchConfigConvertorBase)

whole, *synthetic = sys.argv[1:]
out = {whole: EngineArgs(model=whole, skip_tokenizer_init=True).create_model_config().max_model_len}
for path in synthetic:
    try:
        hf = get_config(path, trust_remote_code=False)
        text = get_hf_text_config(hf)
        convertor = MODEL_ARCH_CONFIG_CONVERTORS.get(hf.model_type, ModelArchConfigConvertorBase)
        arch = convertor(hf, text).convert(supports_multimodal=False)
        out[path] = _get_and_verify_max_len(
            hf_config=text, model_arch_config=arch, tokenizer_config=None, max_model_len=None,
            disable_sliding_window=False, sliding_window=None)
    except Exception as exc:
        out[path] = f"{type(exc).__name__}: {exc}"
print("RESULT " + json.dumps(out))
"""


def test_context_length_is_vllms(tmp_path: Path) -> None:
    dirs = []
    for name, config, _ in CASES:
        if name == "unknown-family":
            continue
        path = tmp_path / name
        path.mkdir()
        (path / "config.json").write_text(json.dumps(config))
        dirs.append(str(path))
    done = subprocess.run([str(VLLM_PYTHON), "-c", VLLM_SIDE, str(TINY_MODEL), *dirs],
                          capture_output=True, text=True, timeout=240,
                          env={**os.environ, "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"})
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    vllm = json.loads(lines[-1][len("RESULT "):])
    ours = {}
    for path in [str(TINY_MODEL), *dirs]:
        derived = model_context_length(path)
        ours[path] = None if derived is None else derived.tokens
    assert ours == vllm
