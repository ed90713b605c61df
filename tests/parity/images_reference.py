"""The reference side of test_images.py, run with the engine's Python (vLLM + transformers):
each image file loaded as ``vllm serve`` loads it (``ImageMediaIO("RGB").load_bytes``) and
preprocessed by transformers' ``Qwen2VLImageProcessorPil``; each chat rendered by the tokenizer's
chat template (transformers), encoded, and each ``<|image_pad|>`` replaced as vLLM's Qwen2-VL
processor replaces it (``[id] * grid_thw.prod() // merge_size**2``).

stdin: a list of jobs {"files": [path...], "preprocessor": {...}, "model_dir": str,
"chats": [[message...]...], "out": dir}; each writes out/<i>.npz (pixel_values,
image_grid_thw) or out/<i>.err, and out/ids.json (the chats' ids, each chat's images being
files[0..k-1] in order).
"""

import json
import sys
from pathlib import Path

import numpy as np
from transformers import AutoTokenizer
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
from vllm.multimodal.media.image import ImageMediaIO


def main() -> None:
    tokenizers: dict[bytes, object] = {}  # the models share their tokenizer files: load once
    for job in json.load(sys.stdin):
        run(job, tokenizers)


def run(job: dict, tokenizers: dict) -> None:
    out = Path(job["out"])
    processor = Qwen2VLImageProcessorPil(**{k: v for k, v in job["preprocessor"].items()
                                            if not k.endswith("_type") and k != "processor_class"})
    loader = ImageMediaIO(image_mode="RGB")
    grids = []
    for i, path in enumerate(job["files"]):
        try:
            image = loader.load_bytes(Path(path).read_bytes()).media
            result = processor(images=[image], return_tensors="np")
        except Exception as e:  # noqa: BLE001 - the test compares refusals too
            (out / f"{i}.err").write_text(f"{type(e).__name__}: {e}")
            grids.append(None)
            continue
        np.savez(out / f"{i}.npz", pixel_values=result["pixel_values"],
                 image_grid_thw=result["image_grid_thw"])
        grids.append(result["image_grid_thw"][0].tolist())
    root = Path(job["model_dir"])
    key = (root / "tokenizer.json").read_bytes() + (root / "tokenizer_config.json").read_bytes()
    if key not in tokenizers:
        tokenizers[key] = AutoTokenizer.from_pretrained(root)
    tokenizer = tokenizers[key]
    pad = tokenizer.convert_tokens_to_ids("<|image_pad|>")
    merge = processor.merge_size ** 2
    all_ids = []
    for chat in job["chats"]:
        ids = tokenizer.apply_chat_template(chat, tokenize=True, add_generation_prompt=True)
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        expanded, image = [], 0
        for token_id in ids:
            if token_id == pad:
                t, h, w = grids[image]
                expanded += [pad] * (t * h * w // merge)
                image += 1
            else:
                expanded.append(token_id)
        all_ids.append(expanded)
    (out / "ids.json").write_text(json.dumps(all_ids))


if __name__ == "__main__":
    main()
