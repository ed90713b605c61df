"""Every supported component, alone or in a chain, against HF ``tokenizers`` (ids + decode).

Each case takes a tokenizer trained in the tests, swaps one component for the one under test
(built as tokenizer.json, exactly as a file would carry it) and compares encode with and
without special tokens and decode with and without skipping them on a few hundred mixed
strings: scripts, emoji ZWJ sequences, combining marks, whitespace runs, CRLF, digits,
contractions in both cases, control characters and special-token look-alikes.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers.tokenizer_support import assert_parity, hf_from_obj, mixed_texts, trained_obj

TEXTS = mixed_texts(21, 160) + [
    "", " ", "  leading and trailing  ", "Σίσυφος ΟΔΟΣ", "İstanbul ǅ ß ﬁ", "x\u0301\u0302",
    "a1b22c333 ¹²³ ½ ٣٤ ൬", "don't DON'T we'LL", "\r\n\r\n\t \u00a0", "<|im_start|>user\nhi<|im_end|>",
    "foo<think>bar</think> <think>  x", "▁▁a ▁", "__init__ self.x_y", "email@example.com #tag $5.00",
]


def _regex(pattern: str) -> dict[str, Any]:
    return {"Regex": pattern}


BYTE_LEVEL_TAIL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
BEHAVIORS = ["Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"]

PRE_TOKENIZERS: dict[str, Any] = {
    **{
        f"split-regex-{b}-{inv}": {"type": "Split", "pattern": _regex(r"\s+|\p{P}"), "behavior": b, "invert": inv}
        for b in BEHAVIORS
        for inv in (False, True)
    },
    **{
        f"split-string-{b}": {"type": "Split", "pattern": {"String": "a"}, "behavior": b, "invert": False}
        for b in BEHAVIORS
    },
    "digits-individual": {"type": "Digits", "individual_digits": True},
    "digits-contiguous": {"type": "Digits", "individual_digits": False},
    **{f"punctuation-{b}": {"type": "Punctuation", "behavior": b} for b in BEHAVIORS},
    "whitespace": {"type": "Whitespace"},
    "whitespace-split": {"type": "WhitespaceSplit"},
    "bert": {"type": "BertPreTokenizer"},
    "sequence": {
        "type": "Sequence",
        "pretokenizers": [
            {"type": "WhitespaceSplit"},
            {"type": "Digits", "individual_digits": True},
            {"type": "Punctuation", "behavior": "Isolated"},
        ],
    },
}


@pytest.mark.parametrize("name", sorted(PRE_TOKENIZERS))
def test_pre_tokenizer_before_byte_level(name: str) -> None:
    obj = trained_obj("gpt2")
    obj["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [PRE_TOKENIZERS[name], BYTE_LEVEL_TAIL]}
    assert_parity(obj, TEXTS, label=f"pre_tokenizer {name}")


@pytest.mark.parametrize("use_regex", [True, False])
@pytest.mark.parametrize("add_prefix_space", [True, False])
def test_byte_level_options(use_regex: bool, add_prefix_space: bool) -> None:
    obj = trained_obj("gpt2")
    obj["pre_tokenizer"] = {
        "type": "ByteLevel", "add_prefix_space": add_prefix_space, "trim_offsets": True, "use_regex": use_regex,
    }
    assert_parity(obj, TEXTS, label=f"ByteLevel regex={use_regex} prefix={add_prefix_space}")


def test_split_then_byte_level_with_prefix_space_per_piece() -> None:
    obj = trained_obj("qwen")
    obj["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = True
    assert_parity(obj, TEXTS, label="Split + ByteLevel(add_prefix_space)")


@pytest.mark.parametrize("scheme", ["always", "first", "never"])
@pytest.mark.parametrize("split", [True, False])
def test_metaspace(scheme: str, split: bool) -> None:
    obj = trained_obj("sp_bpe")
    obj["normalizer"] = None
    obj["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": scheme, "split": split}
    obj["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "ByteFallback"}, {"type": "Metaspace", "replacement": "▁", "prepend_scheme": scheme, "split": split},
    ]}
    assert_parity(obj, TEXTS, add_special_tokens=(False, True), label=f"Metaspace {scheme} split={split}")


def test_metaspace_first_after_special_token() -> None:
    obj = trained_obj("sp_bpe")
    obj["normalizer"] = None
    obj["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False}
    texts = ["<s>hello world", "hello <s> world", "<s> x", " <s>", "a</s>b</s>"]
    assert_parity(obj, texts, label="Metaspace first + control tokens")


NORMALIZERS: dict[str, Any] = {
    "nfc": {"type": "NFC"},
    "nfd": {"type": "NFD"},
    "nfkc": {"type": "NFKC"},
    "nfkd": {"type": "NFKD"},
    "lowercase": {"type": "Lowercase"},
    "replace-string": {"type": "Replace", "pattern": {"String": " "}, "content": "▁"},
    "replace-regex": {"type": "Replace", "pattern": {"Regex": r"\s+"}, "content": "_\\1$0"},
    "prepend": {"type": "Prepend", "prepend": "▁"},
    "strip-both": {"type": "Strip", "strip_left": True, "strip_right": True},
    "strip-left": {"type": "Strip", "strip_left": True, "strip_right": False},
    "sequence": {"type": "Sequence", "normalizers": [
        {"type": "NFKD"}, {"type": "Lowercase"}, {"type": "Prepend", "prepend": "▁"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "▁"},
    ]},
}


@pytest.mark.parametrize("name", sorted(NORMALIZERS))
def test_normalizer(name: str) -> None:
    obj = trained_obj("sp_bpe")
    obj["normalizer"] = NORMALIZERS[name]
    assert_parity(obj, TEXTS, label=f"normalizer {name}")


@pytest.mark.parametrize("name", ["nfd", "lowercase", "strip-both"])
def test_normalizer_on_byte_level(name: str) -> None:
    obj = trained_obj("qwen")
    obj["normalizer"] = NORMALIZERS[name]
    assert_parity(obj, TEXTS, label=f"byte-level normalizer {name}")


DECODERS: dict[str, Any] = {
    "replace-fallback-fuse-strip": {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"},
        {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0},
    ]},
    "strip-per-token": {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0},
    ]},
    "replace-regex": {"type": "Replace", "pattern": {"Regex": "▁+"}, "content": "_"},
    "metaspace-never": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "never", "split": True},
    "metaspace-legacy": {"type": "Metaspace", "replacement": "▁", "add_prefix_space": True},
    "fuse-only": {"type": "Fuse"},
    "bytefallback-only": {"type": "ByteFallback"},
    "null": None,
}


@pytest.mark.parametrize("name", sorted(DECODERS))
def test_decoder(name: str) -> None:
    obj = trained_obj("sp_bpe")
    obj["decoder"] = DECODERS[name]
    assert_parity(obj, TEXTS, label=f"decoder {name}")


POST: dict[str, Any] = {
    "template": {"type": "TemplateProcessing",
                 "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                            {"SpecialToken": {"id": "</s>", "type_id": 0}}, {"SpecialToken": {"id": "<s>", "type_id": 1}}],
                 "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                 "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]},
                                    "</s>": {"id": "</s>", "ids": [2], "tokens": ["</s>"]}}},
    "roberta": {"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 1], "trim_offsets": True,
                "add_prefix_space": True},
    "bert": {"type": "BertProcessing", "sep": ["</s>", 2], "cls": ["<s>", 1]},
    "bytelevel": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
    "sequence": {"type": "Sequence", "processors": [
        {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                                  {"Sequence": {"id": "A", "type_id": 0}}],
         "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
         "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
    ]},
}


@pytest.mark.parametrize("name", sorted(POST))
def test_post_processor(name: str) -> None:
    obj = trained_obj("sp_bpe")
    obj["post_processor"] = POST[name]
    assert_parity(obj, TEXTS[:60], add_special_tokens=(False, True), label=f"post_processor {name}")


def _added(content: str, **flags: Any) -> dict[str, Any]:
    base = {"id": 0, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": False, "special": False}
    base.update(flags)
    return base


@pytest.mark.parametrize(
    "flags",
    [
        {"lstrip": True}, {"rstrip": True}, {"lstrip": True, "rstrip": True}, {"single_word": True},
        {"normalized": True}, {"special": True}, {"normalized": True, "single_word": True, "rstrip": True},
    ],
    ids=lambda f: "-".join(sorted(f)),
)
def test_added_token_flags(flags: dict[str, Any]) -> None:
    obj = trained_obj("qwen")
    obj["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Lowercase"}]}
    obj["added_tokens"] += [_added("<think>", **flags), _added("Foo", **flags), _added("  ", **flags),
                            _added("ab", **flags), _added("é", **flags)]
    texts = TEXTS + ["<think> foo FOO Foo afoo Foob", "  <think>  x", "ab abc cab  ab\t", "é É e\u0301"]
    assert_parity(obj, texts, add_special_tokens=(False, True), label=f"added {flags}")


def test_added_token_ids_follow_the_reference() -> None:
    # contents missing from the vocab get consecutive ids from the vocab size, whatever "id" says
    obj = trained_obj("qwen")
    obj["added_tokens"] += [_added("<new1>", id=5), _added("<new2>", id=999999, special=True), _added("Ġthe", id=7)]
    tok = assert_parity(obj, ["<new1><new2> the", " the<new2>"], label="added ids")
    ref = hf_from_obj(obj)
    for content in ("<new1>", "<new2>", "Ġthe", "<think>"):
        assert tok.token_to_id(content) == ref.token_to_id(content), content
        token_id = ref.token_to_id(content)
        assert tok.id_to_token(token_id) == ref.id_to_token(token_id), content
    assert tok.token_to_id("<new2>") == len(obj["model"]["vocab"]) + 6  # after 5 added + <new1>
    assert tok.special_ids == {i for i, t in ref.get_added_tokens_decoder().items() if t.special}
