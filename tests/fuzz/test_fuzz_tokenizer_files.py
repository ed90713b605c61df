"""Fuzz tokenizer.json / tokenizer_config.json loading: load cleanly or TokenizerFileError naming where.

Inputs: tiny tokenizers trained now with HF ``tokenizers`` (byte-level BPE with a Split regex and
added tokens, SentencePiece-style BPE with byte fallback and a template post-processor, Unigram
with Metaspace), mutated by hypothesis (random nodes replaced by random JSON values or by copies of
other nodes, keys deleted, lists cut), truncated or byte-flipped files, unknown component types,
merges naming unknown tokens, duplicate/negative ids, and a big vocabulary.

Allowed outcomes: the file loads (``validate()`` included), after which encode / decode /
token_bytes / id_to_token of random text and ids raise nothing but InvalidInput; or
TokenizerFileError whose message names the JSON path (``$...``) or, for unparsable files, the file.

Deeper run: ``TEXTPROC_MAX_EXAMPLES=5000 .venv/bin/python -m pytest tests/fuzz/test_fuzz_tokenizer_files.py``;
the 1M-entry vocabulary runs with ``-m slow`` (or TEXTPROC_MAX_EXAMPLES >= 1000).
"""

from __future__ import annotations

import copy
import json
import resource
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.helpers.fuzz import FUZZ_TEXTS, SMALL_KINDS, hostile_text, require_deep_run, small_tokenizer_json
from textproc import Tokenizer
from textproc.errors import InvalidInput, TokenizerFileError

# Values planted into tokenizer.json (huge and sparse ids included: they once loaded and then
# allocated max_id+1 table entries; see the regressions at the end of this file).
_PLANT_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**20), max_value=2**20),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.sampled_from(["BPE", "Unigram", "WordPiece", "WordLevel", "ByteLevel", "Sequence", "Split",
                     "Metaspace", "NFC", "NFKC", "Replace", "Strip", "ByteFallback", "Fuse",
                     "TemplateProcessing", "Whitespace", "Bert", "Digits", "Punctuation", "Prepend",
                     "isolated", "removed", "always", "first", "never", "$A", "$B", "<s>",
                     "Ġ", "▁", "<0x41>", "(", ".*", r"\p{L}+"]),
)
_PLANT = st.recursive(
    _PLANT_SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from(["type", "vocab", "merges", "pattern", "Regex", "String",
                                         "content", "id", "special", "normalizers", "pretokenizers",
                                         "decoders", "processors", "single", "pair", "ids", "tokens",
                                         "behavior", "replacement", "pattern", "unk_id", "x"]),
                        inner, max_size=3),
    ),
    max_leaves=6,
)

# how many elements of a long list/dict (vocab, merges) can be picked as a mutation site
_SITES_PER_CONTAINER = 12


def _sites(obj: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path]
    if isinstance(obj, dict):
        for key in list(obj)[:_SITES_PER_CONTAINER]:
            out += _sites(obj[key], path + (key,))
    elif isinstance(obj, list):
        for i, item in enumerate(obj[:_SITES_PER_CONTAINER]):
            out += _sites(item, path + (i,))
    return out


def _get(obj: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        obj = obj[key]
    return obj


@st.composite
def mutated_tokenizer(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    kind = draw(st.sampled_from(SMALL_KINDS))
    obj = small_tokenizer_json(kind)
    for _ in range(draw(st.integers(1, 3))):
        sites = _sites(obj)[1:]
        path = draw(st.sampled_from(sites))
        parent = _get(obj, path[:-1])
        op = draw(st.sampled_from(["plant", "plant", "copy", "delete", "cut"]))
        if op == "delete":
            if isinstance(parent, dict):
                del parent[path[-1]]
            else:
                del parent[path[-1]]
        elif op == "copy":
            other = _get(obj, draw(st.sampled_from(sites)))
            if len(json.dumps(other)) < 2000:
                parent[path[-1]] = copy.deepcopy(other)
        elif op == "cut":
            target = parent[path[-1]]
            if isinstance(target, list):
                parent[path[-1]] = target[: draw(st.integers(0, len(target)))]
            elif isinstance(target, str):
                parent[path[-1]] = target[: draw(st.integers(0, len(target)))]
        else:
            parent[path[-1]] = draw(_PLANT)
    return kind, obj


_ids = st.lists(st.one_of(st.integers(-5, 400), st.integers(-(2**70), 2**70)), max_size=12)


def _exercise(tok: Tokenizer, texts: list[str], ids: list[int]) -> None:
    """Everything a loaded tokenizer offers; only InvalidInput may come out."""
    for text in texts:
        for special in (False, True):
            try:
                out = tok.encode(text, add_special_tokens=special)
            except InvalidInput:
                continue
            assert all(type(i) is int and i >= 0 for i in out), out
            tok.decode(out)
            tok.decode(out, skip_special_tokens=True)
    for skip in (False, True):
        assert isinstance(tok.decode(ids, skip_special_tokens=skip), str)
        for i in ids:
            assert isinstance(tok.token_bytes(i, skip_special_tokens=skip), bytes)
            tok.id_to_token(i)
    tok.vocab_bytes()
    assert isinstance(tok.vocab_size, int) and tok.vocab_size >= 0
    for name in ("<|im_end|>", "<s>", "▁", "a"):
        tok.token_to_id(name)


def _load_or_clean_error(obj: Any, source: str = "<fuzz>") -> Tokenizer | None:
    try:
        tok = Tokenizer.from_json(obj, source=source)
        tok.validate()
    except TokenizerFileError as e:
        assert "$" in str(e) and source in str(e), f"error does not name the JSON path/source: {e}"
        return None
    return tok


@given(mutated_tokenizer(), st.lists(hostile_text, max_size=3), _ids)
def test_mutated_tokenizer_json_loads_or_names_the_path(case: tuple[str, dict[str, Any]],
                                                         texts: list[str], ids: list[int]) -> None:
    _kind, obj = case
    tok = _load_or_clean_error(obj)
    if tok is not None:
        _exercise(tok, texts + FUZZ_TEXTS[:2], ids)


@given(st.sampled_from(SMALL_KINDS), st.sampled_from(["normalizer", "pre_tokenizer", "decoder",
                                                      "post_processor", "model"]),
       st.one_of(st.text(max_size=12), st.sampled_from(["WordPiece", "WordLevel", "BertPreTokenizer",
                                                        "Precompiled", "CTC", "RobertaProcessing"])))
def test_unknown_component_types_are_named(kind: str, component: str, type_name: str) -> None:
    obj = small_tokenizer_json(kind)
    if not isinstance(obj.get(component), dict):
        obj[component] = {}
    obj[component]["type"] = type_name
    tok = _load_or_clean_error(obj)
    if tok is not None:
        _exercise(tok, FUZZ_TEXTS, [0, 1, 5])


@given(st.sampled_from(SMALL_KINDS), st.data())
def test_missing_fields(kind: str, data: st.DataObject) -> None:
    obj = small_tokenizer_json(kind)
    sites = [p for p in _sites(obj)[1:] if isinstance(_get(obj, p[:-1]), dict)]
    for path in data.draw(st.lists(st.sampled_from(sites), min_size=1, max_size=3, unique=True)):
        try:
            del _get(obj, path[:-1])[path[-1]]
        except (KeyError, TypeError):  # an ancestor was deleted already
            pass
    tok = _load_or_clean_error(obj)
    if tok is not None:
        _exercise(tok, FUZZ_TEXTS, [0, 3, 10**9])


@given(st.sampled_from(SMALL_KINDS), st.data())
def test_truncated_and_flipped_files(tmp_path_factory: pytest.TempPathFactory, kind: str,
                                     data: st.DataObject) -> None:
    raw = json.dumps(small_tokenizer_json(kind), ensure_ascii=data.draw(st.booleans())).encode()
    cut = data.draw(st.integers(0, len(raw)))
    body = bytearray(raw[:cut] if data.draw(st.booleans()) else raw)
    for _ in range(data.draw(st.integers(0, 3))):
        if body:
            body[data.draw(st.integers(0, len(body) - 1))] = data.draw(st.integers(0, 255))
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    path.write_bytes(bytes(body))
    try:
        tok = Tokenizer.from_file(path)
        tok.validate()
    except TokenizerFileError as e:
        assert str(path) in str(e), e
        return
    _exercise(tok, FUZZ_TEXTS[:2], [0, 1])


_CONFIG = {
    "bos_token": {"content": "<s>", "lstrip": False, "special": True},
    "eos_token": "<|im_end|>",
    "pad_token": None,
    "chat_template": "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}",
    "added_tokens_decoder": {"0": {"content": "<|endoftext|>", "special": True}},
    "model_max_length": 32768,
}


@st.composite
def mutated_config(draw: st.DrawFn) -> Any:
    conf: Any = copy.deepcopy(_CONFIG)
    if draw(st.integers(0, 9)) == 0:
        return draw(_PLANT)
    for _ in range(draw(st.integers(1, 3))):
        sites = _sites(conf)[1:]
        if not sites:
            break
        path = draw(st.sampled_from(sites))
        parent = _get(conf, path[:-1])
        if draw(st.booleans()) and isinstance(parent, dict):
            del parent[path[-1]]
        else:
            parent[path[-1]] = draw(st.one_of(_PLANT, st.lists(
                st.fixed_dictionaries({"name": _PLANT_SCALARS, "template": _PLANT_SCALARS}), max_size=2)))
    return conf


@given(mutated_config(), st.sampled_from(["tokenizer_config.json", "special_tokens_map.json"]),
       st.booleans())
def test_mutated_config_files(tmp_path_factory: pytest.TempPathFactory, conf: Any, name: str,
                              truncate: bool) -> None:
    model = tmp_path_factory.mktemp("model")
    (model / "tokenizer.json").write_text(json.dumps(small_tokenizer_json("bytelevel")))
    text = json.dumps(conf)
    (model / name).write_text(text[: len(text) // 2] if truncate else text)
    try:
        tok = Tokenizer.from_dir(model)
    except TokenizerFileError as e:
        assert name in str(e), e
        return
    assert tok.chat_template is None or isinstance(tok.chat_template, (str, dict))
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in tok.special_tokens_map.items())
    for attr in ("eos_token_id", "bos_token_id"):
        value = getattr(tok, attr)
        assert value is None or type(value) is int


def test_specific_malformed_vocabularies() -> None:
    """Hand-made classics: each is a TokenizerFileError naming the path, or loads and works."""
    cases: list[tuple[str, Any]] = []
    obj = small_tokenizer_json("bytelevel")
    obj["model"]["merges"].append(["zzq", "qqz"])
    cases.append(("merge of unknown tokens", obj))
    obj = small_tokenizer_json("bytelevel")
    first = next(iter(obj["model"]["vocab"]))
    obj["model"]["vocab"][first] = -1
    cases.append(("negative vocab id", obj))
    obj = small_tokenizer_json("bytelevel")
    a, b = list(obj["model"]["vocab"])[40:42]
    obj["model"]["vocab"][a] = obj["model"]["vocab"][b]
    cases.append(("duplicate vocab id", obj))
    obj = small_tokenizer_json("bytelevel")
    obj["added_tokens"][1]["id"] = obj["added_tokens"][2]["id"]
    cases.append(("duplicate added id", obj))
    obj = small_tokenizer_json("bytelevel")
    obj["added_tokens"][1]["id"] = -7
    cases.append(("negative added id", obj))
    obj = small_tokenizer_json("unigram")
    obj["model"]["unk_id"] = 10**6
    cases.append(("unk_id outside the pieces", obj))
    obj = small_tokenizer_json("unigram")
    obj["model"]["vocab"][4] = ["x"]
    cases.append(("unigram piece without score", obj))
    obj = small_tokenizer_json("bytelevel")
    obj["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {"Regex": "(("}
    cases.append(("bad split regex", obj))
    obj = small_tokenizer_json("sp_bpe")
    obj["post_processor"]["single"][0] = {"SpecialToken": {"id": "<nope>", "type_id": 0}}
    cases.append(("template names an unknown special token", obj))
    outcomes = {}
    for label, case in cases:
        tok = _load_or_clean_error(case, source=label)
        if tok is not None:
            _exercise(tok, FUZZ_TEXTS, [0, 1, -1, 10**6])
        outcomes[label] = "loaded" if tok is not None else "error"
    # the ones that cannot mean anything must be refused, not loaded
    for label in ("merge of unknown tokens", "negative vocab id", "bad split regex",
                  "unk_id outside the pieces", "template names an unknown special token"):
        assert outcomes[label] == "error", (label, outcomes)


def _big_vocab(n: int) -> dict[str, Any]:
    obj = small_tokenizer_json("bytelevel")
    vocab = obj["model"]["vocab"]
    base = max(vocab.values()) + 1
    for i in range(n):
        vocab[f"tok{i}"] = base + i
    for added in obj["added_tokens"]:
        if added["content"] not in vocab:
            added["id"] = base + n + added["id"]
    return obj


def _check_big(n: int, max_seconds: float, max_rss_mb: float) -> None:
    obj = _big_vocab(n)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    tok = Tokenizer.from_json(obj)
    tok.validate()
    ids = tok.encode("Hello world tok5 <|im_end|>")
    text = tok.decode(list(range(0, tok.vocab_size, max(1, n // 1000))))
    elapsed = time.perf_counter() - t0
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) / 1024
    assert tok.vocab_size == len(obj["model"]["vocab"]) + sum(
        1 for a in obj["added_tokens"] if a["content"] not in obj["model"]["vocab"])
    assert ids and "tok" in text
    assert tok.decode([tok.vocab_size - 1, tok.vocab_size + 5, -1])
    assert elapsed < max_seconds, f"{n} entries took {elapsed:.1f} s"
    assert grown_mb < max_rss_mb, f"{n} entries grew the process by {grown_mb:.0f} MB"


def test_big_vocabulary_loads_in_bounded_time_and_memory() -> None:
    _check_big(100_000, max_seconds=20.0, max_rss_mb=400)


@pytest.mark.slow
def test_million_entry_vocabulary(request: pytest.FixtureRequest) -> None:
    require_deep_run(request)
    # measured on the loaded 2-core box: ~7 s (load + first decode), ~140 MB
    _check_big(1_000_000, max_seconds=90.0, max_rss_mb=1500)


# ---- regressions: found by this fuzzer / atheris, fixed by the TOKENIZER helper ---------------

def _deep(kind_key: str, leaf: dict[str, Any], depth: int) -> dict[str, Any]:
    node = leaf
    for _ in range(depth):
        node = {"type": "Sequence", kind_key: [node]}
    return node


@pytest.mark.parametrize("component,key,leaf", [
    ("normalizer", "normalizers", {"type": "NFC"}),
    ("pre_tokenizer", "pretokenizers", {"type": "ByteLevel", "add_prefix_space": False,
                                        "use_regex": True, "trim_offsets": False}),
    ("decoder", "decoders", {"type": "ByteLevel"}),
])
def test_deeply_nested_components_fail_cleanly(component: str, key: str, leaf: dict[str, Any]) -> None:
    obj = small_tokenizer_json("bytelevel")
    obj[component] = _deep(key, leaf, 5000)
    with pytest.raises(TokenizerFileError, match=r"\$\." + component):
        Tokenizer.from_json(obj)


def test_deeply_nested_json_file_fails_cleanly(tmp_path: Path) -> None:
    path = tmp_path / "tokenizer.json"
    path.write_text("[" * 100_000)
    with pytest.raises(TokenizerFileError, match="tokenizer.json"):
        Tokenizer.from_file(path)


@pytest.mark.parametrize("token_id", [2**40, 2**31, 10**9])
def test_huge_token_id_is_refused_at_load(token_id: int) -> None:
    # once: loaded, then decode allocated max_id+1 entries (2**31: ~16 GB, found by atheris)
    obj = small_tokenizer_json("bytelevel")
    obj["model"]["vocab"]["Ġzzz"] = token_id
    with pytest.raises(TokenizerFileError, match=r"\$\.model\.vocab"):
        Tokenizer.from_json(obj)
