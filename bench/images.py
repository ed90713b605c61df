#!/usr/bin/env python3
"""CPU per image: textproc's worker preprocessing vs vLLM's loading + transformers' processor.

    .venv/bin/python bench/images.py [--quick] [--json PATH] [--reps N]

One run, the same generated images on both sides (no photos in the repo): for each case, the
CPU milliseconds (``time.process_time``, median of ``--reps``) to turn the encoded file into the
model's pixel values and grid: textproc's ``textproc.vision.preprocess.prepare_image`` in this
process, and what ``vllm serve`` runs (``vllm.multimodal.media.image.ImageMediaIO.load_bytes``
then transformers' ``Qwen2VLImageProcessorPil``, the processor vLLM uses where torchvision is
absent) in the engine's environment (``.venv-vllm``), one process for all its cases. Cases:
Qwen2.5-VL's published processor settings and Qwen3-VL's, on a PNG and JPEGs of several sizes
(``--quick``: one small PNG). Each line has both times, their ratio (reference / textproc: above
1 means textproc is cheaper), the image's tokens, whether the grids agree, and the load average.
"""

from __future__ import annotations

import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

from textproc.testing.bench_cli import bench_parser
from textproc.testing.models import REPO_ROOT
from textproc.vision.families import ImageProcessing
from textproc.vision.preprocess import prepare_image

VLLM_PYTHON = REPO_ROOT / ".venv-vllm" / "bin" / "python"
PROCESSORS = {
    "qwen2.5-vl": {"min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14,
                   "temporal_patch_size": 2, "merge_size": 2},
    "qwen3-vl": {"min_pixels": 65536, "max_pixels": 16777216, "patch_size": 16,
                 "temporal_patch_size": 2, "merge_size": 2, "image_mean": [0.5, 0.5, 0.5],
                 "image_std": [0.5, 0.5, 0.5]},
}
SIZES = [(640, 480, "PNG"), (1280, 720, "JPEG"), (1920, 1080, "JPEG")]
QUICK_SIZES = [(320, 240, "PNG")]

# the reference side, run by the engine's Python: {"files", "processors", "reps"} on stdin
REFERENCE = r"""
import json, statistics, sys, time
from pathlib import Path
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
from vllm.multimodal.media.image import ImageMediaIO
job = json.load(sys.stdin)
loader = ImageMediaIO(image_mode="RGB")
out = {}
for name, config in job["processors"].items():
    processor = Qwen2VLImageProcessorPil(**config)
    for path in job["files"]:
        data = Path(path).read_bytes()
        times = []
        for _ in range(job["reps"]):
            t = time.process_time()
            result = processor(images=[loader.load_bytes(data).media], return_tensors="np")
            times.append(time.process_time() - t)
        out[f"{name} {Path(path).name}"] = [statistics.median(times),
                                            result["image_grid_thw"][0].tolist()]
print(json.dumps(out))
"""


def _image(width: int, height: int, fmt: str) -> bytes:
    rng = np.random.default_rng(width * height)
    y, x = np.mgrid[0:height, 0:width]
    pixels = ((x + y)[..., None] + rng.integers(0, 64, (height, width, 3))) % 256
    out = io.BytesIO()
    Image.fromarray(pixels.astype(np.uint8)).save(out, fmt, **({"quality": 90}
                                                             if fmt == "JPEG" else {}))
    return out.getvalue()


def _processing(config: dict[str, object]) -> ImageProcessing:
    return ImageProcessing().with_file(config, "bench")


def main() -> int:
    parser = bench_parser(__doc__, quick="one small PNG, 3 reps", model=None)
    parser.add_argument("--reps", type=int, default=7, help="timed runs per case (median)")
    args = parser.parse_args()
    if not VLLM_PYTHON.is_file():
        parser.error(f"no engine environment at {VLLM_PYTHON}: bash scripts/setup_vllm.sh")
    reps = 3 if args.quick else args.reps
    sizes = QUICK_SIZES if args.quick else SIZES
    with tempfile.TemporaryDirectory() as tmp:
        files = []
        for width, height, fmt in sizes:
            path = Path(tmp) / f"{width}x{height}.{fmt.lower()}"
            path.write_bytes(_image(width, height, fmt))
            files.append(path)
        job = {"files": [str(f) for f in files], "processors": PROCESSORS, "reps": reps}
        run = subprocess.run([str(VLLM_PYTHON), "-c", REFERENCE], input=json.dumps(job),
                             text=True, capture_output=True, timeout=1200)
        if run.returncode != 0:
            print(run.stderr[-2000:], file=sys.stderr)
            return 1
        reference = json.loads(run.stdout.strip().splitlines()[-1])
        results = []
        for name, config in PROCESSORS.items():
            processing = _processing(config)
            for path in files:
                data = path.read_bytes()
                times = []
                for _ in range(reps):
                    t = time.process_time()
                    prepared = prepare_image(data, path.name, processing)
                    times.append(time.process_time() - t)
                ref_s, ref_grid = reference[f"{name} {path.name}"]
                mine_s = statistics.median(times)
                results.append({
                    "case": f"{name} {path.name}", "bytes": len(data),
                    "textproc_cpu_ms": round(mine_s * 1000, 2),
                    "reference_cpu_ms": round(ref_s * 1000, 2),
                    "ratio": round(ref_s / mine_s, 2) if mine_s else None,
                    "tokens": prepared.n_tokens,
                    "same_grid": list(prepared.grid_thw) == ref_grid,
                    "load_avg": [round(x, 2) for x in os.getloadavg()],
                })
    for r in results:
        print(f"{r['case']:<28} textproc {r['textproc_cpu_ms']:8.1f} ms  vllm+transformers "
              f"{r['reference_cpu_ms']:8.1f} ms  ratio {r['ratio']}  tokens {r['tokens']}  "
              f"same_grid={r['same_grid']}  load {r['load_avg']}")
    if args.json:
        with args.json.open("a") as f:
            for r in results:
                f.write(json.dumps(r) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
