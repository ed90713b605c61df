"""The ids that end a request, as the worker builds them: vLLM's rule (the tokenizer's EOS plus
the generation config's eos_token_id; a request's own stop ids; ignore_eos; min_tokens), the
same with ``--generation-config none``, and a compiled constraint that ends with exactly those
ids. Socket-free (RequestBuilder on the toy model): well under a second.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import msgspec
import pytest

from textproc.config import ServiceConfig
from textproc.core.tokenizer import Tokenizer
from textproc.errors import InvalidInput
from textproc.options import SamplingOptions
from textproc.protocol import CompletionRequest, EngineRequest
from textproc.service.request_builder import RequestBuilder

pytestmark = pytest.mark.timeout(60)


def _builder(tok: Tokenizer, model: Path, **kw: Any) -> RequestBuilder:
    return RequestBuilder(tok, ServiceConfig(model_dir=str(model), max_model_len=512, **kw))


def _engine(builder: RequestBuilder, **sampling: Any) -> EngineRequest:
    req = CompletionRequest("r", "hi", sampling=SamplingOptions(max_tokens=8, **sampling))
    return msgspec.msgpack.decode(builder.completion(req, b"c").submit.engine_request,
                                  type=EngineRequest)


def test_stop_ids_are_the_tokenizers_eos_and_the_generation_configs(toy_model: Path,
                                                                    tmp_path: Path) -> None:
    tok = Tokenizer.from_dir(toy_model)
    eos, eot = tok.added_tokens["<|im_end|>"], tok.added_tokens["<|endoftext|>"]
    word = tok.encode("hello")[0]  # an ordinary token the file names as an end id
    model = tmp_path / "model"
    shutil.copytree(toy_model, model)
    # no generation config (and no config.json): the tokenizer's EOS alone, as vLLM stops;
    # <|endoftext|> is special but ends nothing
    bare = _engine(_builder(tok, model))
    assert bare.stop_token_ids == [eos] == bare.eos_token_ids
    (model / "generation_config.json").write_text(json.dumps(
        {"eos_token_id": [eos, word], "temperature": 0.6}))
    ends = sorted([eos, word])
    auto = _builder(tok, model)
    plain = _engine(auto)
    assert plain.stop_token_ids == ends == plain.eos_token_ids and plain.sampling == {"temperature": 0.6}
    assert _engine(auto, stop_token_ids=[eot]).stop_token_ids == sorted([eos, word, eot])
    # ignore_eos: only the request's own ids stop it; the EOS ids still go along, masked by
    # the engine until min_tokens (vLLM's all_stop_token_ids)
    ignoring = _engine(auto, ignore_eos=True, min_tokens=3, stop_token_ids=[eot])
    assert ignoring.stop_token_ids == [eot] and ignoring.eos_token_ids == ends
    assert ignoring.ignore_eos and ignoring.min_tokens == 3
    # --generation-config none (vLLM's "vllm"): no sampling defaults, the same end ids
    none = _engine(_builder(tok, model, generation_config="none"))
    assert none.stop_token_ids == ends == none.eos_token_ids and none.sampling == {}
    # a compiled constraint ends with exactly the ids the engine stops on
    req = CompletionRequest("s", "hi", structured={"regex": "[ab]+"},
                            sampling=SamplingOptions(max_tokens=8))
    table = auto.completion(req, b"c").submit.index
    assert table is not None and table.end_ids == ends


def test_an_eos_id_the_tokenizer_lacks_stops_the_worker(toy_model: Path, tmp_path: Path) -> None:
    tok = Tokenizer.from_dir(toy_model)
    model = tmp_path / "model"
    shutil.copytree(toy_model, model)
    (model / "generation_config.json").write_text(json.dumps({"eos_token_id": [tok.vocab_size]}))
    with pytest.raises(InvalidInput, match=rf"eos_token_id \[{tok.vocab_size}\] in .*generation_config"
                                           rf"\.json: the tokenizer has ids 0\.\.{tok.vocab_size - 1}"):
        _builder(tok, model)
