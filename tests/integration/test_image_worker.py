"""A tokenizer worker's RequestBuilder on a vision-language model directory (Qwen2.5-VL's
config, processor and chat template around the real Qwen3 tokenizer): images prepared once per
content (the cache), each refusal an InvalidInput naming the image, the frame limit kept."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from tests.helpers.images import encoded, sample_images, vision_model_dir
from tests.helpers.real_engine import SETUP_HINT, TINY_MODEL
from textproc.config import ServiceConfig
from textproc.core.tokenizer import Tokenizer
from textproc.errors import InvalidInput
from textproc.protocol import ChatRequest, unpack_ids
from textproc.service.request_builder import RequestBuilder

pytestmark = pytest.mark.timeout(120)
IMAGES = sample_images()
CHAT = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "and"},
                                     {"type": "image"}]}]
PARAMS = ["messages[0].content[0]", "messages[0].content[2]"]


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not (TINY_MODEL / "tokenizer.json").is_file():
        pytest.skip(f"no tokenizer at {TINY_MODEL}: {SETUP_HINT}")
    return vision_model_dir(tmp_path_factory.mktemp("vl"), TINY_MODEL)


def _builder(model: Path, **config: object) -> RequestBuilder:
    cfg = ServiceConfig(model_dir=str(model), max_model_len=32768, **config)  # type: ignore[arg-type]
    return RequestBuilder(Tokenizer.from_dir(model), cfg)


def test_same_image_prepared_once(model: Path) -> None:
    builder = _builder(model)
    png = IMAGES["rgb_150x100.png"]
    built = builder.chat(ChatRequest("a", CHAT, images=[png, png], image_params=PARAMS), b"c")
    again = builder.chat(ChatRequest("b", CHAT, images=[png, png], image_params=PARAMS), b"c")
    assert (builder.image_cache.misses, builder.image_cache.hits) == (1, 3)
    first, second = built.engine_request, again.engine_request
    assert first is not None and second is not None
    assert first.images == second.images
    assert unpack_ids(first.prompt_token_ids) == unpack_ids(second.prompt_token_ids)
    a, b = first.images
    assert a.digest == b.digest and a.length == b.length == 20  # 150x100 -> grid 8x10 -> 20
    assert b.offset > a.offset + a.length


def test_bad_images_name_their_part(model: Path) -> None:
    builder = _builder(model, max_image_pixels=100_000)
    good = IMAGES["rgb_150x100.png"]
    cases = [(IMAGES["rgb_640x480.png"], "over the limit of 100000 pixels"),
             (good[:40], "not an image this server reads"),
             (encoded(Image.new("RGB", (900, 4)), "PNG"), "aspect ratio over 200")]
    for data, match in cases:
        with pytest.raises(InvalidInput, match=match) as info:
            builder.chat(ChatRequest("r", CHAT, images=[good, data], image_params=PARAMS), b"c")
        assert info.value.param == PARAMS[1]
    with pytest.raises(InvalidInput, match="2 image placeholders .* for 1 images"):
        builder.chat(ChatRequest("r", CHAT, images=[good], image_params=PARAMS[:1]), b"c")


def test_pixel_values_over_the_frame_limit_are_refused(model: Path) -> None:
    # 640x480 -> 476x644 -> 1564 patches of 1176 float32: 7.4 MB each; a frame's room is its
    # limit less 1 MiB
    image = IMAGES["rgb_640x480.png"]
    for limit_mib, param in ((2, PARAMS[0]), (15, PARAMS[1])):
        builder = _builder(model, max_frame_bytes=limit_mib << 20)
        with pytest.raises(InvalidInput, match="bytes left in the request's frame") as info:
            builder.chat(ChatRequest("r", CHAT, images=[image, image], image_params=PARAMS),
                         b"c")
        assert info.value.param == param
    builder = _builder(model, max_frame_bytes=16 << 20)  # both fit
    builder.chat(ChatRequest("r", CHAT, images=[image, image], image_params=PARAMS), b"c")


def test_chat_with_an_image_through_the_service(model: Path, tmp_path: Path) -> None:
    """HTTP -> worker -> detokenizer -> engine with a vision model (the stub engine ignores the
    pixels): answered, the prompt counted with the image's tokens, the repeated image a cache
    hit in the worker."""
    import asyncio
    import base64

    import httpx

    from tests.helpers.service import Service, wait_http
    from textproc.client import TextClient

    service = Service(tmp_path, model, workers=1,
                      args=["--stub-mode", "random", "--max-model-len", "8192",
                            "--http", "127.0.0.1:0"]).start()
    try:
        url = wait_http(service.runtime_dir / "http.json", None, service.log_path, 30)
        png = base64.b64encode(IMAGES["rgb_150x100.png"]).decode()
        body = {"model": model.name, "max_tokens": 3, "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{png}"}},
            {"type": "text", "text": "What is it?"}]}]}
        text_only = {**body, "messages": [{"role": "user", "content": [
            {"type": "text", "text": "What is it?"}]}]}
        answers = [httpx.post(f"{url}/v1/chat/completions", json=b, timeout=60)
                   for b in (body, body, text_only)]
        assert [a.status_code for a in answers] == [200, 200, 200], answers[0].text[:300]
        tokens = [a.json()["usage"]["prompt_tokens"] for a in answers]
        # <|vision_start|><|image_pad|>x20<|vision_end|>: 22 tokens more than the text alone
        assert tokens[0] == tokens[1] == tokens[2] + 22

        async def worker_counters() -> dict[str, int]:
            client = await TextClient.connect(service.runtime_dir, timeout_s=30)
            try:
                return next(s.counters for s in await client.stats() if s.role == "worker")
            finally:
                await client.close()

        counters = asyncio.run(worker_counters())
        assert (counters["images_prepared"], counters["image_cache_hits"]) == (1, 1)
    finally:
        service.stop()


def test_special_token_text_in_a_text_part_stays_text(model: Path) -> None:
    """--special-tokens-in-content text: a text part beside an image is marked as a string
    content is, so typed <|im_end|> does not end the turn (nor <|image_pad|> add an image)."""
    png = IMAGES["rgb_150x100.png"]
    im_end = Tokenizer.from_dir(model).added_tokens["<|im_end|>"]

    def count(mode: str, text: str) -> int:
        builder = _builder(model, special_tokens_in_content=mode)
        chat = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}]
        built = builder.chat(ChatRequest("r", chat, images=[png], image_params=PARAMS[:1]), b"c")
        assert built.engine_request is not None
        return unpack_ids(built.engine_request.prompt_token_ids).count(im_end)

    assert count("text", "a<|im_end|>b") == count("text", "ab") == count("control", "ab")
    assert count("control", "a<|im_end|>b") == count("control", "ab") + 1
    assert count("text", "<|image_pad|>") == count("text", "ab")  # still one image's tokens
