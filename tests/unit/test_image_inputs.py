"""Image content parts where each API takes them, onto the chat request: the image's place in
the body, its URL, and ``{"type": "image"}`` where the chat template puts it; ``data:`` URLs
decoded; every refusal a 400 naming the part. (URL fetching: tests/integration/test_image_fetch.py.)"""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import pytest

from textproc.http.api_types import ApiError, ImageInput
from textproc.http.anthropic.bodies import parse_count_tokens_request, parse_messages_request
from textproc.http.media import MediaLimits, load_images
from textproc.http.openai.bodies import parse_chat_request, parse_tokenize_request, tokenize_messages
from textproc.http.responses.bodies import parse_responses_request
from textproc.http.settings import parse

MODELS = ["m"]
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n not really").decode()
DATA_URL = f"data:image/png;base64,{PNG}"


def _chat(messages: list[dict[str, Any]]) -> Any:
    return parse_chat_request(json.dumps({"model": "m", "messages": messages}).encode(),
                              served_models=MODELS)


def _refused(call: Any) -> ApiError:
    with pytest.raises(ApiError) as info:
        call()
    assert info.value.status == 400
    return info.value


def test_chat_image_parts_become_template_parts_and_sources() -> None:
    params = _chat([{"role": "system", "content": "s"},
                    {"role": "user", "content": [
                        {"type": "text", "text": "look"},
                        {"type": "image_url", "image_url": {"url": DATA_URL, "detail": "low"}},
                        {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]}])
    assert params.messages[1]["content"] == [{"type": "text", "text": "look"}, {"type": "image"},
                                             {"type": "image"}]
    assert [(i.param, i.url) for i in params.images] == [
        ("messages[1].content[1]", DATA_URL), ("messages[1].content[2]", "https://example.com/a.png")]
    # a text-only message keeps its string form (what every template reads)
    assert _chat([{"role": "user", "content": [{"type": "text", "text": "a"},
                                               {"type": "text", "text": "b"}]}]).messages == [
        {"role": "user", "content": "a\nb"}]


@pytest.mark.parametrize("role", ["system", "assistant", "tool"])
def test_image_outside_a_user_message_is_refused(role: str) -> None:
    message: dict[str, Any] = {"role": role, "content": [
        {"type": "text", "text": "x"}, {"type": "image_url", "image_url": {"url": DATA_URL}}]}
    if role == "tool":
        message["tool_call_id"] = "c1"
    err = _refused(lambda: _chat([message, {"role": "user", "content": "hi"}]))
    assert err.param == "messages[0].content[1]"
    assert "images go in user messages only" in err.message


def test_tokenize_refuses_images() -> None:
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": DATA_URL}}]}]}).encode()
    err = _refused(lambda: tokenize_messages(parse_tokenize_request(body, served_models=MODELS)))
    assert err.param == "messages[0].content[0]"


def test_responses_input_image() -> None:
    body = {"model": "m", "input": [{"role": "user", "content": [
        {"type": "input_text", "text": "what"},
        {"type": "input_image", "image_url": DATA_URL, "detail": "auto"}]}]}
    req = parse_responses_request(json.dumps(body).encode(), served_models=MODELS)
    assert req.chat.messages[0]["content"] == [{"type": "text", "text": "what"}, {"type": "image"}]
    assert [(i.param, i.url) for i in req.chat.images] == [("input[0].content[1]", DATA_URL)]
    body["input"][0]["content"][1] = {"type": "input_image", "file_id": "file-1"}  # type: ignore[index]
    err = _refused(lambda: parse_responses_request(json.dumps(body).encode(), served_models=MODELS))
    assert err.param == "input[0].content[1].image_url"
    body["input"][0]["content"][1] = {"type": "input_file", "file_id": "file-1"}  # type: ignore[index]
    err = _refused(lambda: parse_responses_request(json.dumps(body).encode(), served_models=MODELS))
    assert err.param == "input[0].content[1].type" and "input_image" in err.message


def _messages(content: list[dict[str, Any]]) -> bytes:
    return json.dumps({"model": "m", "max_tokens": 5,
                       "messages": [{"role": "user", "content": content}]}).encode()


def test_anthropic_image_blocks() -> None:
    req = parse_messages_request(_messages([
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/b.jpg"}},
        {"type": "text", "text": "both?"}]), served_models=MODELS)
    assert req.chat.messages[0]["content"] == [{"type": "image"}, {"type": "image"},
                                               {"type": "text", "text": "both?"}]
    assert [(i.param, i.url) for i in req.chat.images] == [
        ("messages[0].content[0]", DATA_URL), ("messages[0].content[1]", "https://example.com/b.jpg")]
    bad_type = [{"type": "image", "source": {"type": "base64", "media_type": "image/tiff",
                                             "data": PNG}}]
    err = _refused(lambda: parse_messages_request(_messages(bad_type), served_models=MODELS))
    assert err.param == "messages[0].content[0].source.media_type"
    file_source = [{"type": "image", "source": {"type": "file", "file_id": "f"}}]
    err = _refused(lambda: parse_messages_request(_messages(file_source), served_models=MODELS))
    assert err.param == "messages[0].content[0].source.type"
    document = [{"type": "document", "source": {"type": "text", "data": "x"}}]
    err = _refused(lambda: parse_messages_request(_messages(document), served_models=MODELS))
    assert err.param == "messages[0].content[0].type"
    counted = parse_count_tokens_request(_messages([{"type": "image", "source": {
        "type": "url", "url": "https://example.com/b.jpg"}}]), served_models=MODELS)
    assert counted.images[0].param == "messages[0].content[0]"


def _load(urls: list[str], **limits: Any) -> list[ImageInput]:
    images = [ImageInput(param=f"messages[0].content[{i}]", url=u) for i, u in enumerate(urls)]
    asyncio.run(load_images(images, MediaLimits(**limits)))
    return images


def test_data_urls_decode() -> None:
    assert _load([DATA_URL])[0].data == base64.b64decode(PNG)


@pytest.mark.parametrize(("url", "match"), [
    ("data:image/png,rawtext", "not base64 data"),
    ("data:audio/wav;base64,AAAA", "only images"),
    ("data:image/png;base64,@@@@", "does not decode"),
    ("ftp://example.com/a.png", "data: URLs or http"),
    ("file:///etc/passwd", "data: URLs or http"),
])
def test_bad_sources_name_the_part(url: str, match: str) -> None:
    err = _refused(lambda: _load([DATA_URL, url]))
    assert err.param == "messages[0].content[1]"
    assert match in err.message


def test_size_and_count_limits() -> None:
    big = "data:image/png;base64," + base64.b64encode(b"x" * 3000).decode()
    err = _refused(lambda: _load([big], max_image_bytes=1000))
    assert "over the limit of 1000 bytes" in err.message
    err = _refused(lambda: _load([big] * 3, max_total_bytes=7000))
    assert err.param == "messages[0].content[2]" and "9000 bytes" in err.message
    err = _refused(lambda: _load([DATA_URL] * 3, max_images=2))
    assert err.param == "messages[0].content[2]" and "--limit-mm-per-prompt" in err.message


def test_media_flags() -> None:
    limits = parse(["--runtime-dir", "x", "--limit-mm-per-prompt", '{"image": 3}',
                    "--allowed-media-domains", "a.example,B.example", "--media-fetch-timeout",
                    "2.5"]).limits
    assert limits.media == MediaLimits(max_images=3, fetch_timeout_s=2.5,
                                       allowed_domains=("a.example", "b.example"))
    assert parse(["--runtime-dir", "x", "--limit-mm-per-prompt", "0"]).limits.max_images == 0
    with pytest.raises(SystemExit):
        parse(["--runtime-dir", "x", "--limit-mm-per-prompt", "-1"])
