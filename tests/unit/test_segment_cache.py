"""The segment cache is invisible: encoding with it equals encoding without it, on real
vocabularies and real chat templates, across follow-up turns with random edits to earlier turns
(so a stale entry would show), and it is bounded by bytes."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from textproc.testing.corpus import fast_items
from tests.helpers.models import model_dir
from tests.helpers.templates import template_source
from textproc.core.chat.template import render_chat
from textproc.core.tok.segments import SegmentCache
from textproc.core.tokenizer import Tokenizer

# (vocabulary, template): byte-level BPE with ChatML (its turn markers are added tokens, so
# turns are separate segments); SentencePiece and GPT-2 with templates whose markers are plain
# text in those vocabularies (one segment: the cache must stay exact there too)
PAIRS = [("qwen3", "qwen3"), ("mistral", "mistral-nemo"), ("gpt2", "llama3.1")]


PIECES = [t for t in (item[1] if isinstance(item, tuple) else item for item in fast_items()) if t.strip()]
_LOADED: dict[str, tuple[Tokenizer, Tokenizer]] = {}


def _tokenizers(vocab: str) -> tuple[Tokenizer, Tokenizer]:
    """(with a small segment cache, without one), loaded once per vocabulary; the cache is
    emptied for each example so examples do not depend on each other."""
    if vocab not in _LOADED:
        cached = Tokenizer.from_dir(model_dir(vocab))
        plain = Tokenizer.from_dir(model_dir(vocab))
        plain.segment_cache = SegmentCache(max_bytes=0)  # nothing is ever kept
        _LOADED[vocab] = (cached, plain)
    cached, plain = _LOADED[vocab]
    cached.segment_cache = SegmentCache(max_bytes=2 << 20, min_chars=16)
    return cached, plain


def _render(template: str, messages: list[dict[str, Any]]) -> str:
    return render_chat(template, messages, add_generation_prompt=True,
                       bos_token="<s>", eos_token="</s>")


@pytest.mark.parametrize(("vocab", "template_name"), PAIRS)
@settings(max_examples=20)
@given(seed=st.integers(0, 2**32 - 1))
def test_follow_up_turns_with_edits_encode_as_without_the_cache(
        vocab: str, template_name: str, seed: int) -> None:
    cached, plain = _tokenizers(vocab)
    template = template_source(template_name)
    rng = random.Random(seed)
    messages: list[dict[str, Any]] = []
    for turn in range(6):
        body = "".join(rng.choice(PIECES)[: rng.randint(1, 300)] for _ in range(rng.randint(1, 4)))
        messages.append({"role": "user" if turn % 2 == 0 else "assistant", "content": body})
        if messages[-1]["role"] == "assistant":
            continue
        if len(messages) > 2 and rng.random() < 0.5:  # edit an earlier turn: a stale hit would show
            i = rng.randrange(len(messages) - 1)
            text = messages[i]["content"]
            cut = rng.randint(0, len(text))
            messages[i] = {**messages[i], "content": text[:cut] + rng.choice(PIECES)[:40] + text[cut:]}
        prompt = _render(template, messages)
        assert cached.encode(prompt) == plain.encode(prompt), f"seed {seed}, turn {turn}"
    if vocab == "qwen3":  # ChatML's turn markers are Qwen3's added tokens: old turns hit
        assert cached.segment_cache.hits > 0


def test_hits_on_resent_conversations_and_bounded_by_bytes() -> None:
    tok = Tokenizer.from_dir(model_dir("qwen3"))
    tok.segment_cache = SegmentCache(max_bytes=64 << 10, min_chars=16)
    rng = random.Random(0)
    messages = [{"role": "user", "content": "word " * 200}]
    for i in range(60):
        prompt = _render(template_source("qwen3"), messages)
        tok.encode(prompt)
        messages += [{"role": "assistant", "content": f"answer {i} " * rng.randint(5, 50)},
                     {"role": "user", "content": f"question {i} " * rng.randint(5, 50)}]
        assert tok.segment_cache.nbytes <= 64 << 10
    assert tok.segment_cache.hits > 100
    assert tok.segment_cache.counters()["segment_cache_entries"] == len(tok.segment_cache)


def test_disabled_and_short_segments_are_not_kept() -> None:
    tok = Tokenizer.from_dir(model_dir("qwen3"))
    assert tok.segment_cache.min_chars >= 64  # short segments: the piece cache is enough
    tok.encode("<|im_start|>user\nhi<|im_end|>")
    assert len(tok.segment_cache) == 0
    tok.segment_cache = SegmentCache(max_bytes=0, min_chars=1)
    tok.encode("<|im_start|>user\n" + "long text " * 100 + "<|im_end|>")
    assert len(tok.segment_cache) == 0 and tok.segment_cache.nbytes == 0


def test_follow_ups_prefer_the_conversations_worker_without_unbalancing() -> None:
    from textproc.client.inflight import AFFINITY_SLACK, InFlight, conversation_key

    inflight = InFlight(2)
    first = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi " * 5000}]
    key = conversation_key(first)
    assert key is not None
    assert key == conversation_key(first + [{"role": "assistant", "content": "hello"},
                                            {"role": "user", "content": "more"}])
    assert conversation_key([]) is None and conversation_key("x") is None
    home = key % 2
    assert {inflight.pick_worker(key) for _ in range(10)} == {home}  # idle pool: always home
    for i in range(AFFINITY_SLACK + 1):  # home busier than the other by more than the slack
        inflight.worker_pending[home].add(f"r{i}")
    assert inflight.pick_worker(key) == 1 - home
    other = [{"role": "user", "content": "a different conversation"}]
    picks = {inflight.pick_worker(conversation_key(other)) for _ in range(4)}
    assert picks <= {0, 1}
