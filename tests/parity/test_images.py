"""Image preprocessing against the reference: transformers' Qwen2-VL image processor after
vLLM's image loading (run in the engine's environment, ``images_reference.py``), on images made
here. Pixel values bit for bit, grids equal, and a chat's prompt ids (placeholders
expanded) equal to the reference's ids."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.helpers.images import sample_images, vision_model_dir
from tests.helpers.real_engine import SETUP_HINT, TINY_MODEL, VLLM_PYTHON
from textproc.config import ServiceConfig
from textproc.core.tokenizer import Tokenizer
from textproc.protocol import ChatRequest, unpack_ids
from textproc.service.request_builder import RequestBuilder
from textproc.vision.families import load_vision
from textproc.vision.preprocess import prepare_image

pytestmark = pytest.mark.timeout(300)
REFERENCE = Path(__file__).with_name("images_reference.py")
# small max_pixels too: the downscaling branch of smart_resize on every image
PROCESSORS = {
    "qwen2_5_vl": None,
    "qwen2_5_vl-small": {"min_pixels": 3136, "max_pixels": 200704, "patch_size": 14,
                         "temporal_patch_size": 2, "merge_size": 2},
    "qwen3_vl": {"size": {"shortest_edge": 65536, "longest_edge": 16777216}, "patch_size": 16,
                 "temporal_patch_size": 2, "merge_size": 2, "image_mean": [0.5, 0.5, 0.5],
                 "image_std": [0.5, 0.5, 0.5]},
}


CHATS: list[list[dict[str, object]]] = [
    [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is it?"}]}],
    [{"role": "system", "content": "Be brief."},
     {"role": "user", "content": [{"type": "text", "text": "Compare "}, {"type": "image"},
                                  {"type": "text", "text": " and "}, {"type": "image"}]}],
]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The reference's answers for every processor, in one run of the engine's Python."""
    if not VLLM_PYTHON.is_file() or not (TINY_MODEL / "tokenizer.json").is_file():
        pytest.skip(f"no engine environment or tiny model: {SETUP_HINT}")
    root = tmp_path_factory.mktemp("images")
    images = sample_images()
    files = []
    for n in sorted(images):
        (root / n).write_bytes(images[n])
        files.append(str(root / n))
    jobs = []
    for name, preprocessor in PROCESSORS.items():
        model = vision_model_dir(root / name / "model", TINY_MODEL,
                                 model_type=name.split("-")[0], preprocessor=preprocessor)
        out = root / name / "reference"
        out.mkdir()
        jobs.append({"files": files, "model_dir": str(model), "chats": CHATS, "out": str(out),
                     "preprocessor": json.loads((model / "preprocessor_config.json").read_text())})
    run = subprocess.run([str(VLLM_PYTHON), str(REFERENCE)], input=json.dumps(jobs), text=True,
                         capture_output=True, timeout=280)
    assert run.returncode == 0, run.stderr[-3000:]
    return root


@pytest.mark.parametrize("name", sorted(PROCESSORS))
def test_images_match_transformers_and_vllm(name: str, reference: Path) -> None:
    model, out = reference / name / "model", reference / name / "reference"
    images = sample_images()
    names = sorted(images)
    vision = load_vision(model)
    assert vision is not None
    for i, n in enumerate(names):
        assert not (out / f"{i}.err").exists(), (out / f"{i}.err").read_text()
        ref = np.load(out / f"{i}.npz")
        mine = prepare_image(images[n], n, vision.processing)
        assert list(mine.grid_thw) == ref["image_grid_thw"][0].tolist(), n
        assert mine.pixel_values.shape == ref["pixel_values"].shape, n
        assert mine.pixel_values.dtype == np.float32
        # the same float operations on the same values: the same bits
        np.testing.assert_array_equal(mine.pixel_values, ref["pixel_values"], err_msg=n)
    config = ServiceConfig(model_dir=str(model), max_model_len=32768)
    builder = RequestBuilder(Tokenizer.from_dir(model), config)
    reference_ids = json.loads((out / "ids.json").read_text())
    for k, (chat, ref_ids) in enumerate(zip(CHATS, reference_ids)):
        count = sum(1 for m in chat if isinstance(m["content"], list)
                    for p in m["content"] if p["type"] == "image")  # type: ignore[index,union-attr]
        chosen = names[:count]
        built = builder.chat(ChatRequest(f"r{k}", chat, images=[images[n] for n in chosen],
                                         image_params=[f"messages[0].content[{j}]"
                                                       for j in range(count)]), b"c")
        request = built.engine_request
        assert request is not None
        assert unpack_ids(request.prompt_token_ids) == ref_ids, f"{name} chat {k}"
        assert [im.digest for im in request.images] == [
            prepare_image(images[n], n, vision.processing).digest for n in chosen]
        for im in request.images:
            span = unpack_ids(request.prompt_token_ids)[im.offset:im.offset + im.length]
            assert span == [builder.image_token_id] * im.length
            assert im.n_patches * im.patch_dim * 4 == len(im.pixel_values)
