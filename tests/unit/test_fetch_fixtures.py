"""scripts/fetch_fixtures.py: the SentencePiece converter against sentencepiece on a model trained
here, Qwen's pattern reader, and the cached (idempotent, fast) path."""

from __future__ import annotations

import importlib.util
import io
import json
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest
import sentencepiece as spm
import tokenizers

from textproc.testing.corpus import EDGE_CASES, REFERENCE_REFUSES, fast_items
from tests.helpers.models import MODELS_DIR, REPO_ROOT


def _load_script() -> ModuleType:
    path = REPO_ROOT / "scripts" / "fetch_fixtures.py"
    spec = importlib.util.spec_from_file_location("fetch_fixtures", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("fetch_fixtures", module)
    spec.loader.exec_module(module)
    return module


fetch = _load_script()


@pytest.fixture(scope="module")
def sp_model() -> bytes:
    """A small SentencePiece BPE with byte fallback, trained now (Llama-2 settings)."""
    model = io.BytesIO()
    texts = [t for _, t in fast_items(120_000, seed=3) if "\x00" not in t]
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts), model_writer=model, model_type="bpe", vocab_size=1500,
        byte_fallback=True, character_coverage=0.98, normalization_rule_name="identity",
        add_dummy_prefix=True, remove_extra_whitespaces=False, split_digits=True,
        allow_whitespace_only_pieces=True, max_sentence_length=100_000, num_threads=1,
        minloglevel=2,
    )
    return model.getvalue()


def test_sentencepiece_converter_matches_sentencepiece(sp_model: bytes) -> None:
    obj = fetch.sentencepiece_to_tokenizer_json(sp_model)
    hf = tokenizers.Tokenizer.from_str(json.dumps(obj))
    hf.encode_special_tokens = True  # sentencepiece never reads "<s>" in text as control
    sp = spm.SentencePieceProcessor(model_proto=sp_model)
    texts = [t for n, t in EDGE_CASES.items() if n not in REFERENCE_REFUSES]
    texts += [t for _, t in fast_items(40_000, seed=5)]
    for text in texts:
        ids = sp.encode(text)
        assert hf.encode(text, add_special_tokens=False).ids == ids, text[:80]
        assert hf.decode(ids) == sp.decode(ids), text[:80]
    assert hf.encode("x", add_special_tokens=True).ids[0] == sp.bos_id()


def test_sentencepiece_merges_order_is_transformers(sp_model: bytes) -> None:
    """Same merges, same order as transformers' generate_merges (what its converter writes)."""
    from sentencepiece import sentencepiece_model_pb2 as pb
    from transformers.tokenization_utils_base import generate_merges

    vocab = {"a": 0, "b": 1, "c": 2, "ab": 3, "bc": 4, "abc": 5}
    pieces = [("a", 0.0), ("b", 0.0), ("c", 0.0), ("ab", -1.0), ("bc", -2.0), ("abc", -3.0)]
    # highest score first; for one piece the longer left part first
    assert fetch._sentencepiece_merges(pieces, vocab) == [["a", "b"], ["b", "c"], ["ab", "c"], ["a", "bc"]]
    proto = pb.ModelProto()
    proto.ParseFromString(sp_model)
    pieces = [(p.piece, p.score) for p in proto.pieces]
    vocab = {piece: i for i, (piece, _) in enumerate(pieces)}
    want = [list(m) for m in generate_merges(vocab, dict(pieces))]
    assert fetch._sentencepiece_merges(pieces, vocab) == want


def test_read_pat_str() -> None:
    source = 'X = 1\nPAT_STR = r"""a|b"""  # comment\n'
    assert fetch._read_pat_str(source) == "a|b"
    with pytest.raises(fetch.FixtureError, match="PAT_STR not found"):
        fetch._read_pat_str("Y = 2\n")


def test_cached_run_is_fast_and_prints_one_line_per_vocabulary(capsys: pytest.CaptureFixture[str]) -> None:
    present = [n for n in fetch.RECIPES if (MODELS_DIR / n / "fixture.json").is_file()]
    if not present:
        pytest.skip("no cached vocabularies; run .venv/bin/python scripts/fetch_fixtures.py")
    start = time.monotonic()
    assert fetch.main(["--no-templates", "--only", *present]) == 0
    elapsed = time.monotonic() - start
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split(":")[0] for line in lines] == present
    assert all(": ok (cached;" in line for line in lines), lines
    assert elapsed < 5, elapsed


def test_qwen3_directory_layout() -> None:
    path = MODELS_DIR / "qwen3"
    if not (path / "tokenizer.json").is_file():
        pytest.skip("qwen3 missing; run .venv/bin/python scripts/fetch_fixtures.py")
    config = json.loads((path / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert config["eos_token"] == "<|im_end|>"
    assert config["pad_token"] == "<|endoftext|>"
    assert config["bos_token"] is None
    decoder = {int(k): v for k, v in config["added_tokens_decoder"].items()}
    assert decoder[151643]["content"] == "<|endoftext|>" and decoder[151643]["special"]
    assert decoder[151668]["content"] == "</think>" and not decoder[151668]["special"]
    assert len(decoder) == 26
    hf = tokenizers.Tokenizer.from_file(str(path / "tokenizer.json"))
    assert {t.content: i for i, t in hf.get_added_tokens_decoder().items()} == {
        v["content"]: k for k, v in decoder.items()
    }
    assert all(t.special == decoder[i]["special"] for i, t in hf.get_added_tokens_decoder().items())
    assert Path(path / "qwen.tiktoken").is_file()
