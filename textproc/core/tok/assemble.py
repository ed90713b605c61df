"""A parsed tokenizer.json -> the checked components a :class:`~textproc.core.tokenizer.Tokenizer`
is built from (model, normalizer, pre-tokenizer, added vocabulary, decoder, post-processor).

Owns the top-level checks of the file (no truncation or padding settings, a model type it
supports) and the order the components are read in; each component's own parsing and errors
are in its module. Reads nothing but the object it is handed.
"""

from __future__ import annotations

from typing import Any

from textproc.core.tok.added import AddedVocab
from textproc.core.tok.bpe import BPE
from textproc.core.tok.decoders import build_decoder
from textproc.core.tok.jsonpath import Ctx
from textproc.core.tok.normalizers import build_normalizer
from textproc.core.tok.parts import normalizer_keeps_cuts
from textproc.core.tok.postprocessors import build_postprocessor
from textproc.core.tok.pretokenizers import build_pretokenizer
from textproc.core.tok.unigram import Unigram

__all__ = ["components_from_json"]


def components_from_json(obj: dict[str, Any], source: str) -> dict[str, Any]:
    """The Tokenizer's keyword arguments (all but ``source`` and ``config``) from a parsed
    tokenizer.json; a TokenizerFileError names the JSON path and ``source``."""
    ctx = Ctx(source)
    root = ctx.obj(obj, "$")
    for key in ("truncation", "padding"):
        if root.get(key) is not None:
            ctx.fail(
                f"{key} settings change encode() ids and are not supported; allowed: null", f"$.{key}"
            )
    model_spec = ctx.get(root, "model", "$", dict)
    kind = model_spec.get("type")
    if kind is None:
        kind = "BPE" if "merges" in model_spec else "Unigram" if isinstance(model_spec.get("vocab"), list) else None
    model: BPE | Unigram
    if kind == "BPE":
        model = BPE.from_json(ctx, model_spec, "$.model")
    elif kind == "Unigram":
        model = Unigram.from_json(ctx, model_spec, "$.model")
    else:
        ctx.unsupported("model", kind, "$.model", "BPE, Unigram")
    normalizer = build_normalizer(ctx, root.get("normalizer"), "$.normalizer")
    pre = build_pretokenizer(ctx, root.get("pre_tokenizer"), "$.pre_tokenizer")
    decoder = build_decoder(ctx, root.get("decoder"), "$.decoder")
    post = build_postprocessor(ctx, root.get("post_processor"), "$.post_processor")
    vocab = model.vocab
    vocab_len = len(model.pieces) if isinstance(model, Unigram) else len(vocab)
    added = AddedVocab.from_json(
        ctx,
        ctx.get(root, "added_tokens", "$", list, []),
        "$.added_tokens",
        vocab.get,
        vocab_len,
        normalizer,
    )
    return {
        "model": model,
        "normalizer": normalizer,
        "pre_tokenizer": pre,
        "added": added,
        "decoder": decoder,
        "post": post,
        "raw_units": normalizer_keeps_cuts(root.get("normalizer")),
    }
