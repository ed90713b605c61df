"""Loading: refusals name the component, JSON path, file and what is supported; model dirs;
tiktoken rank files; the Unicode-version and lone-surrogate decisions; the byte contract."""

from __future__ import annotations

import base64
import functools
import json
import random
import re
import unicodedata
from pathlib import Path
from typing import Any

import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers.tokenizer_support import QWEN_PATTERN, assert_parity, hf_from_obj, mixed_texts, trained_obj
from textproc.errors import InvalidInput, TokenizerFileError
from textproc.core.tok.bytelevel import byte_level_bytes
from textproc.core.tok.fastsplit import NEWER_RANGES, ascii_pattern, has_newer
from textproc.core.tokenizer import Tokenizer

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)


def _write(tmp_path: Path, obj: Any, name: str = "tokenizer.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(obj), encoding="utf-8")
    return path


# -- refusals ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda o: o.__setitem__("pre_tokenizer", {"type": "Sequence", "pretokenizers": [
            {"type": "Digits"}, {"type": "WhitespaceSplit"}, {"type": "UnicodeScripts"}]}),
         r"unsupported pre_tokenizer type 'UnicodeScripts' at \$\.pre_tokenizer\.pretokenizers\[2\] in .*tokenizer\.json; supported: Split, ByteLevel"),
        (lambda o: o.__setitem__("normalizer", {"type": "Precompiled", "precompiled_charsmap": "AAAA"}),
         r"unsupported normalizer type 'Precompiled' at \$\.normalizer in .*; supported: NFC"),
        (lambda o: o.__setitem__("normalizer", {"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "BertNormalizer"}]}),
         r"'BertNormalizer' at \$\.normalizer\.normalizers\[1\]"),
        (lambda o: o.__setitem__("decoder", {"type": "WordPiece", "prefix": "##"}),
         r"unsupported decoder type 'WordPiece' at \$\.decoder in .*; supported: ByteLevel"),
        (lambda o: o.__setitem__("post_processor", {"type": "Frobnicate"}),
         r"unsupported post_processor type 'Frobnicate' at \$\.post_processor"),
        (lambda o: o["model"].__setitem__("type", "WordPiece"),
         r"unsupported model type 'WordPiece' at \$\.model in .*; supported: BPE, Unigram"),
        (lambda o: o["model"].__setitem__("dropout", 0.1),
         r"BPE dropout 0\.1 is random and not supported; allowed: null or 0 at \$\.model\.dropout"),
        (lambda o: o.__setitem__("truncation", {"max_length": 5}), r"truncation .* at \$\.truncation"),
        (lambda o: o["model"].__setitem__("vocab", ["a"]), r"expected an object, got \['a'\] at \$\.model\.vocab"),
        (lambda o: o["model"]["vocab"].__setitem__("zz", "7"), r"expected a non-negative integer id, got '7' at \$\.model\.vocab\['zz'\]"),
        (lambda o: o["added_tokens"][0].pop("content"), r"missing field 'content' at \$\.added_tokens\[0\]"),
        (lambda o: o["added_tokens"][1].__setitem__("special", "yes"), r"expected a boolean, got 'yes' at \$\.added_tokens\[1\]\.special"),
        (lambda o: o["pre_tokenizer"]["pretokenizers"][0].__setitem__("behavior", "Sideways"),
         r"unknown behavior 'Sideways'; allowed: Removed, Isolated.* at \$\.pre_tokenizer\.pretokenizers\[0\]\.behavior"),
        (lambda o: o["pre_tokenizer"]["pretokenizers"][0].__setitem__("pattern", {"Regex": "(unclosed"}),
         r"invalid regex '\(unclosed' .* at \$\.pre_tokenizer\.pretokenizers\[0\]\.pattern\.Regex"),
        (lambda o: o.pop("model"), r"missing field 'model' at \$ in"),
    ],
)
def test_unsupported_or_malformed_components_are_refused(tmp_path: Path, mutate: Any, match: str) -> None:
    obj = trained_obj("qwen")
    mutate(obj)
    path = _write(tmp_path, obj)
    with pytest.raises(TokenizerFileError, match=match):
        Tokenizer.from_file(path)


def test_bad_merge_is_refused_with_its_index(tmp_path: Path) -> None:
    obj = trained_obj("qwen")
    obj["model"]["merges"][3] = ["Ġthe", "nope-not-a-token"]
    tok = Tokenizer.from_file(_write(tmp_path, obj))
    with pytest.raises(TokenizerFileError, match=r"uses token 'nope-not-a-token' missing from the vocab at \$\.model\.merges\[3\]"):
        tok.validate()
    obj["model"]["merges"][3] = "a b c"
    with pytest.raises(TokenizerFileError, match=r"expected a pair of tokens, got 'a b c' at \$\.model\.merges\[3\]"):
        Tokenizer.from_file(_write(tmp_path, obj)).encode("hello there")


def test_truncated_and_non_json_files(tmp_path: Path) -> None:
    text = json.dumps(trained_obj("qwen"))
    path = tmp_path / "tokenizer.json"
    path.write_text(text[: len(text) // 2], encoding="utf-8")
    with pytest.raises(TokenizerFileError, match=r"tokenizer\.json is not valid JSON"):
        Tokenizer.from_file(path)
    path.write_bytes(b"\xff\xfe garbage")
    with pytest.raises(TokenizerFileError, match="not valid JSON"):
        Tokenizer.from_file(path)
    path.write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(TokenizerFileError, match=r"expected an object, got \[1, 2\] at \$ in"):
        Tokenizer.from_file(path)
    with pytest.raises(TokenizerFileError, match="cannot read"):
        Tokenizer.from_file(tmp_path / "missing.json")
    with pytest.raises(TokenizerFileError, match="no tokenizer.json in"):
        Tokenizer.from_dir(tmp_path / "nowhere")


@pytest.mark.parametrize("where,token_id,hf_loads", [
    ("vocab", 2**32, False), ("vocab", 2**40, False), ("vocab", 2**31, True),
    ("added", 2**32, False), ("added", -1, False),
])
def test_out_of_range_and_sparse_ids_are_refused_at_load(where: str, token_id: int, hf_loads: bool) -> None:
    obj = trained_obj("qwen")
    if where == "vocab":
        obj["model"]["vocab"]["zzz-new"] = token_id
        path = r"\$\.model\.vocab\['zzz-new'\]"
    else:
        obj["added_tokens"].append({"id": token_id, "content": "<x>", "special": True, "single_word": False,
                                    "lstrip": False, "rstrip": False, "normalized": False})
        path = rf"\$\.added_tokens\[{len(obj['added_tokens']) - 1}\]\.id"
    # HF refuses ids outside u32; a valid but absurdly sparse id it loads, textproc refuses
    # (its id tables are dense: 2**31 would need 16 GB)
    if hf_loads:
        assert hf_from_obj(obj).decode([token_id]) == "zzz-new"
    else:
        with pytest.raises(Exception, match="expected u32"):
            hf_from_obj(obj)
    with pytest.raises(TokenizerFileError, match=rf"token id {token_id} is .*allowed: 0\.\.\d+ at {path}"):
        Tokenizer.from_json(obj)
    # a gap of ordinary size loads, and decodes like HF
    obj = trained_obj("qwen")
    obj["model"]["vocab"]["zzz-new"] = 500_000
    assert Tokenizer.from_json(obj).decode([500_000, 5]) == hf_from_obj(obj).decode([500_000, 5])


def _hf_parsed_scores(texts: list[str]) -> list[float]:
    """The f64s HF tokenizers reads from these JSON number texts (Unigram scores, written back)."""
    import tokenizers

    vocab = ",".join(f'["p{i}", {t}]' for i, t in enumerate(texts))
    text = '{"version": "1.0", "model": {"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0.0], ' + vocab + "]}}"
    back = json.loads(tokenizers.Tokenizer.from_str(text).to_str())["model"]["vocab"][1:]
    return [float(score) for _piece, score in back]


def test_scores_are_parsed_like_serde_json_not_correctly_rounded() -> None:
    from textproc.core.tok.loader import serde_float

    rng = random.Random(7)
    texts = ["-10.000530232488181", "0.0", "-0.0", "5", "-3", "1e-5", "-2.5E+3", "123456789012345678901.5",
             "0.1234567890123456789012345", "-1.7976931348623157e308", "4.9e-324", "1e-400"]
    for _ in range(400):
        value = -rng.random() * 10 ** rng.randint(-3, 4)
        texts += [repr(value), f"{value:.{rng.randint(1, 25)}f}", f"{value:.{rng.randint(1, 20)}e}"]
    ours = [float(serde_float(t)) for t in texts]
    assert ours == _hf_parsed_scores(texts)
    # the point: some differ from Python's correctly rounded float()
    assert any(o != float(t) for o, t in zip(ours, texts))


def test_unigram_ties_follow_hf_scores(tmp_path: Path) -> None:
    pieces = [["<unk>", 0.0], ["▁", -1.204627448589612], ["▁=", -5.715260860112222],
              ["=", -6.433993973982883], ["▁==", -7.521694764057664], ["=" * 13, -10.000530232488181]]
    obj = {"version": "1.0", "normalizer": None, "decoder": None, "added_tokens": [],
           "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": True},
           "model": {"type": "Unigram", "unk_id": 0, "vocab": pieces, "byte_fallback": False}}
    ref = hf_from_obj(obj)
    from_obj = Tokenizer.from_json(obj)
    from_file = Tokenizer.from_file(_write(tmp_path, obj))
    for n in range(1, 40):
        expected = ref.encode("=" * n).ids
        assert from_obj.encode("=" * n) == expected == from_file.encode("=" * n), n


# -- model directories ------------------------------------------------------------------------


def test_from_dir_reads_config_special_tokens_and_chat_templates(tmp_path: Path) -> None:
    _write(tmp_path, trained_obj("qwen"))
    config = {
        "eos_token": {"content": "<|im_end|>", "lstrip": False},
        "bos_token": None,
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "chat_template": [{"name": "default", "template": "{{ messages }}"}, {"name": "tool_use", "template": "T"}],
    }
    _write(tmp_path, config, "tokenizer_config.json")
    tok = Tokenizer.from_dir(tmp_path)
    assert tok.eos_token == "<|im_end|>" and tok.eos_token_id == tok.token_to_id("<|im_end|>") == 1501
    assert tok.bos_token is None and tok.bos_token_id is None
    assert tok.pad_token == "<|endoftext|>"
    assert tok.chat_template == {"default": "{{ messages }}", "tool_use": "T"}
    assert tok.special_tokens_map == {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
    (tmp_path / "chat_template.jinja").write_text("{{ jinja }}", encoding="utf-8")
    assert Tokenizer.from_dir(tmp_path).chat_template == {"default": "{{ jinja }}", "tool_use": "T"}
    config["chat_template"] = "{{ plain }}"
    _write(tmp_path, config, "tokenizer_config.json")
    assert Tokenizer.from_dir(tmp_path).chat_template == "{{ jinja }}"
    config["eos_token"] = 5
    _write(tmp_path, config, "tokenizer_config.json")
    with pytest.raises(TokenizerFileError, match=r"expected a token string or \{'content': \.\.\.\}, got 5 at \$\.eos_token in .*tokenizer_config\.json"):
        Tokenizer.from_dir(tmp_path)


# -- tiktoken rank files ----------------------------------------------------------------------


def test_from_tiktoken_matches_tiktoken(tmp_path: Path) -> None:
    tiktoken = pytest.importorskip("tiktoken")
    obj = trained_obj("qwen")
    # the trainer numbers tokens in merge order, so ids are valid tiktoken ranks
    ranks = {}
    for token, token_id in obj["model"]["vocab"].items():
        data = byte_level_bytes(token)
        if data is not None and token_id > 0:
            ranks[data] = token_id - 1  # id 0 is <|endoftext|>
    path = tmp_path / "toy.tiktoken"
    path.write_bytes(b"".join(base64.b64encode(t) + b" %d\n" % r for t, r in sorted(ranks.items(), key=lambda x: x[1])))
    specials = {"<|endoftext|>": len(ranks), "<|im_start|>": len(ranks) + 1}
    enc = tiktoken.Encoding("toy", pat_str=QWEN_PATTERN, mergeable_ranks=ranks, special_tokens=specials)
    tok = Tokenizer.from_tiktoken(path, QWEN_PATTERN, specials, nfc=True)
    for text in mixed_texts(31, 150) + ["<|endoftext|> hi<|im_start|>"]:
        text = unicodedata.normalize("NFC", text)
        assert tok.encode(text) == enc.encode(text, allowed_special="all"), repr(text)
        assert tok.decode(tok.encode(text)) == text


# -- decisions --------------------------------------------------------------------------------


def test_lone_surrogate_is_invalid_input_like_the_reference() -> None:
    tok = Tokenizer.from_json(trained_obj("qwen"))
    ref = hf_from_obj(trained_obj("qwen"))
    with pytest.raises(Exception):  # noqa: B017 - the reference cannot take it either
        ref.encode("a\ud800b")
    with pytest.raises(InvalidInput, match="lone surrogate"):
        tok.encode("a\ud800b")
    with pytest.raises(InvalidInput, match="must be a str"):
        tok.encode(b"bytes")  # type: ignore[arg-type]


def test_unicode_17_characters_split_as_the_reference_sees_them() -> None:
    # letters/numbers the regex module knows (Unicode 17) but the reference does not (16)
    newer = [chr(a) for a, _b in NEWER_RANGES]
    assert all(has_newer("x" + c) for c in newer) and not has_newer("abc 中文 😀 \u0557")
    texts = [f"ab{c}cd {c}{c} 12{c}3 {c}'s x{c}" for c in newer] + ["".join(newer)]
    for kind in ("qwen", "gpt2"):
        assert_parity(trained_obj(kind), texts, label=f"unicode-17 {kind}")


@pytest.mark.parametrize("pattern", [QWEN_PATTERN, GPT2_PATTERN, CL100K_PATTERN])
@given(text=st.text(alphabet=st.characters(max_codepoint=127), max_size=60))
def test_ascii_rewrite_gives_the_same_pieces(pattern: str, text: str) -> None:
    fast = ascii_pattern(pattern)
    assert fast is not None
    assert re.compile(fast, re.ASCII).findall(text) == regex.findall(pattern, text)


def test_ascii_rewrite_refuses_what_it_cannot_prove() -> None:
    assert ascii_pattern(r"\w+|\p{Greek}") is None
    assert ascii_pattern(r"[\S]") is None


def test_decode_skips_unknown_ids_like_the_reference() -> None:
    obj = trained_obj("qwen")
    tok, ref = Tokenizer.from_json(obj), hf_from_obj(obj)
    ids = [5, 10_000_000, 7, 1501]
    assert tok.decode(ids) == ref.decode(ids, skip_special_tokens=False)
    assert tok.decode(ids, skip_special_tokens=True) == ref.decode(ids, skip_special_tokens=True)
    assert tok.token_bytes(10_000_000) == b"" and tok.id_to_token(10_000_000) is None


@pytest.mark.parametrize("kind", ["qwen", "sp_bpe", "unigram"])
def test_bools_are_ids_0_and_1_like_the_reference(kind: str) -> None:
    # HF takes ids through __index__: True is 1, False is 0, on every decoder path
    obj = trained_obj(kind)
    tok, ref = Tokenizer.from_json(obj), hf_from_obj(obj)
    for ids in ([True, 5], [False], [5, True, False, 7]):
        assert tok.decode(ids) == ref.decode(ids, skip_special_tokens=False) == tok.decode([int(i) for i in ids])
        assert tok.decode(ids, skip_special_tokens=True) == ref.decode(ids, skip_special_tokens=True)
    # id_to_token stays strict (tests/fuzz pins None for bools there), unlike HF
    assert ref.id_to_token(True) == tok.id_to_token(1) and tok.id_to_token(True) is None
    assert tok.token_bytes(True) == tok.token_bytes(1)


@pytest.mark.parametrize("kind", ["qwen", "gpt2"])
def test_byte_level_decode_is_joined_token_bytes(kind: str) -> None:
    obj = trained_obj(kind)
    tok, ref = Tokenizer.from_json(obj), hf_from_obj(obj)
    rng = random.Random(5)
    table = tok.vocab_bytes()
    assert len(table) == tok.vocab_size and table[tok.token_to_id("<|im_start|>")] == b""
    for _ in range(300):
        ids = [rng.randrange(tok.vocab_size) for _ in range(rng.randint(0, 12))]
        for skip in (False, True):
            joined = b"".join(tok.token_bytes(i, skip_special_tokens=skip) for i in ids)
            assert tok.decode(ids, skip_special_tokens=skip) == joined.decode("utf-8", "replace") == ref.decode(
                ids, skip_special_tokens=skip
            )
    assert tok.decode_strip_leading == 0 and tok.byte_fallback_ids == frozenset()


def test_sentencepiece_token_bytes_and_fallback_ids() -> None:
    obj = trained_obj("sp_bpe")
    tok = Tokenizer.from_json(obj)
    assert tok.token_bytes(tok.token_to_id("<0x0A>")) == b"\n"
    piece = next(t for t in obj["model"]["vocab"] if t.startswith("▁") and len(t) > 2)
    assert tok.token_bytes(tok.token_to_id(piece)) == piece.replace("▁", " ").encode()
    assert tok.byte_fallback_ids == {tok.token_to_id(f"<0x{b:02X}>") for b in range(256)}
    assert tok.decode_strip_leading == 1
    assert tok.token_bytes(tok.token_to_id("<s>"), skip_special_tokens=True) == b""


_PARTS = st.sampled_from(
    [" the", " Quick", "x", " ", "  ", "\n", "\r\n", " \n ", "'s", "'LL", "42", ".", ", ", "!?", "é", " é", "中文",
     "😀", "\u00a0", "\t", " ab'cd", "ñ", "Ω ", " ΩA", "a" * 40 + " b", " " * 50, "-- x", "\u3000x"]
)


@pytest.mark.parametrize("pattern", [QWEN_PATTERN, GPT2_PATTERN])
@given(parts=st.lists(_PARTS, max_size=80))
def test_segmented_split_of_mixed_text_gives_the_same_pieces(pattern: str, parts: list[str]) -> None:
    from textproc.core.tok.fastsplit import make_splitter

    text = "".join(parts)
    assert make_splitter(pattern)(text) == regex.findall(pattern, text)


@pytest.mark.parametrize("form", ["NFC", "NFD", "NFKC", "NFKD"])
def test_unicode_normalizers_match_the_reference_on_every_code_point(form: str) -> None:
    from tokenizers import normalizers

    from textproc.core.tok.jsonpath import Ctx
    from textproc.core.tok.normalizers import build_normalizer

    ref = getattr(normalizers, form)()
    ours = build_normalizer(Ctx("<test>"), {"type": form}, "$.normalizer")
    assert ours is not None
    chars = [chr(c) for c in range(0x80, 0x110000) if not 0xD800 <= c < 0xE000]
    for i in range(0, len(chars), 4096):
        # each character alone (joined by a separator neither form touches) and in context
        block = "|".join(chars[i : i + 4096])
        assert ours(block) == ref.normalize_str(block), f"{form} block {i:#x}"
        for glue in ("e\u0301", "a\u0316", "\u0301"):
            mixed = glue.join(chars[i : i + 4096 : 9])
            assert ours(mixed) == ref.normalize_str(mixed), f"{form} {glue!r} block {i:#x}"


def _probe_chars() -> list[str]:
    # every exception of the tables plus a stride over all code points
    from textproc.core.tok import uchars

    cps = set(range(0, 0x110000, 17)) | {int(c) for c in uchars.LOWER_EXTRA}
    for table in (uchars._WORD_REMOVE, uchars._PUNCT_ADD, uchars._PUNCT_REMOVE, uchars._NUM_REMOVE):
        for a, b in table:
            cps.update(range(a, b + 1))
    return [chr(c) for c in sorted(cps) if not 0xD800 <= c < 0xE000]


@pytest.mark.parametrize("kind", ["Whitespace", "Punctuation", "Digits", "BertPreTokenizer", "Lowercase"])
def test_character_classes_match_the_reference(kind: str) -> None:
    from tokenizers import normalizers, pre_tokenizers

    from textproc.core.tok.jsonpath import Ctx
    from textproc.core.tok.normalizers import build_normalizer
    from textproc.core.tok.pretokenizers import build_pretokenizer

    chars = _probe_chars()
    if kind == "Lowercase":
        ours = build_normalizer(Ctx("<test>"), {"type": kind}, "$")
        assert ours is not None
        text = "Σ".join(chars)
        assert ours(text) == normalizers.Lowercase().normalize_str(text)
        return
    ref = getattr(pre_tokenizers, kind)()
    pre = build_pretokenizer(Ctx("<test>"), {"type": kind}, "$")
    for i in range(0, len(chars), 2000):
        text = "a".join(chars[i : i + 2000])
        assert pre.split(text, True) == [p for p, _ in ref.pre_tokenize_str(text)], f"{kind} block {i}"


def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k in ("vocab", "merges") and prefix[-1:] == ("model",):
                out.append(prefix + (k,))
                continue
            out += _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj[:3]):
            out += _paths(v, prefix + (i,))
    return out


@functools.cache
def _small_obj_json() -> str:
    obj = trained_obj("sp_bpe")
    obj["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": r"\s+"}, "behavior": "MergedWithNext", "invert": False},
        {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": True}]}
    obj["post_processor"] = POST_TEMPLATE
    return json.dumps(obj)


POST_TEMPLATE = {
    "type": "TemplateProcessing",
    "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
    "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
    "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}},
}


@settings(max_examples=max(1, settings.default.max_examples // 2))
@given(data=st.data())
def test_mutated_files_raise_tokenizer_file_error_or_work(data: st.DataObject) -> None:
    obj = json.loads(_small_obj_json())
    paths = [p for p in _paths(obj) if p]
    path = data.draw(st.sampled_from(paths))
    parent = obj
    for key in path[:-1]:
        parent = parent[key]
    action = data.draw(st.sampled_from(["delete", "null", "int", "str", "list", "dict", "bool"]))
    replacement = {"null": None, "int": 7, "str": "x", "list": [1], "dict": {"a": 1}, "bool": True}.get(action)
    if action == "delete":
        if isinstance(parent, dict):
            del parent[path[-1]]
        else:
            parent.pop(path[-1])
    else:
        parent[path[-1]] = replacement
    try:
        tok = Tokenizer.from_json(obj, source="mutated.json")
        tok.validate()
        tok.decode(tok.encode("Hello wörld <s> 12 中", add_special_tokens=True))
    except TokenizerFileError as e:
        assert "mutated.json" in str(e)
    except InvalidInput:
        pass  # e.g. an unk_token the mutation removed from the vocabulary
