"""Coverage-guided fuzzing of textproc's input boundaries with atheris (libFuzzer), for long runs.

Not part of the test suite (``tests/fuzz/`` holds the hypothesis fuzzers that run by default; the
targets here are smoke-tested there on a few inputs). Each target takes raw bytes and checks the
same rule as the hypothesis suite: a defined result or the one textproc error the boundary
documents; anything else is a crash that libFuzzer reports with the input that caused it.

Targets:
  tokenizer-json   bytes -> JSON (or a byte-driven mutation of a seed tokenizer.json) ->
                   Tokenizer.from_json (+ validate, encode/decode)
  frames           bytes -> every socket's FrameDecoder (+ unpack_ids)
  chat-template    bytes -> template source rendered in the sandbox with small limits
  schema           bytes -> JSON -> json_schema_to_regex (the regex must compile)
  stream           bytes -> stop list + text + ids through OutputPipeline and OutputParser

Install: ``.venv/bin/pip install -e '.[fuzz]'`` (atheris ships manylinux wheels for CPython 3.11).
Run one target (Ctrl-C to stop; crashes are written as crash-<sha1> files in the cwd):

  .venv/bin/python scripts/fuzz_atheris.py frames -max_total_time=600
  .venv/bin/python scripts/fuzz_atheris.py tokenizer-json -max_total_time=3600 -rss_limit_mb=4096
  .venv/bin/python scripts/fuzz_atheris.py chat-template -timeout=10 -max_total_time=600

Everything after the target name goes to libFuzzer (``-runs=N``, ``-max_len=N``, a corpus dir).
Known bugs pinned by xfail tests in tests/fuzz/ (deep nesting RecursionError, huge ids/counts)
will be found again by these targets until they are fixed.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["TARGETS", "main"]

_SEED_TOKENIZER: dict[str, Any] = {
    "version": "1.0",
    "truncation": None,
    "padding": None,
    "added_tokens": [{"id": 6, "content": "<|im_end|>", "single_word": False, "lstrip": False,
                      "rstrip": False, "normalized": False, "special": True}],
    "normalizer": {"type": "NFC"},
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                      "use_regex": True},
    "post_processor": None,
    "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
    "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
              "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
              "ignore_merges": False,
              "vocab": {"a": 0, "b": 1, "Ġ": 2, "ab": 3, "Ġa": 4, "Ġab": 5},
              "merges": [["a", "b"], ["Ġ", "a"], ["Ġa", "b"]]},
}


_PLANTS: list[Any] = [
    None, True, False, 0, -1, 1, 7, 2**31, 1.5, float("nan"), "", "x", "a b", "BPE", "Unigram",
    "WordPiece", "ByteLevel", "Sequence", "Split", "Metaspace", "NFC", "Replace", "Strip",
    "ByteFallback", "Fuse", "TemplateProcessing", "isolated", "$A", "<s>", "Ġ", "▁", "<0x41>",
    "(", r"\p{L}+", [], [1], ["a", "b"], [None], {}, {"type": "X"}, {"type": "Sequence"},
    {"Regex": "a|b"}, {"String": " "},
]


def _paths(obj: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path]
    if isinstance(obj, dict):
        for key in list(obj)[:16]:
            out += _paths(obj[key], path + (key,))
    elif isinstance(obj, list):
        for i, item in enumerate(obj[:16]):
            out += _paths(item, path + (i,))
    return out


def _mutated_seed(data: bytes) -> Any:
    """The seed tokenizer.json with the mutations ``data`` spells out (bytes drive every choice)."""
    obj: Any = json.loads(json.dumps(_SEED_TOKENIZER))
    stream = iter(data)
    for _ in range(1 + next(stream, 0) % 4):
        paths = _paths(obj)[1:]
        if not paths:
            break
        path = paths[(next(stream, 0) << 8 | next(stream, 0)) % len(paths)]
        parent = obj
        for key in path[:-1]:
            parent = parent[key]
        op = next(stream, 0) % 4
        if op == 0 and isinstance(parent, dict):
            del parent[path[-1]]
        elif op == 1:
            other = paths[next(stream, 0) % len(paths)]
            node = obj
            for key in other:
                node = node[key]
            parent[path[-1]] = json.loads(json.dumps(node))
        elif op == 2:
            parent[path[-1]] = int.from_bytes(bytes(next(stream, 0) for _ in range(3)), "little") - 2**22
        else:
            parent[path[-1]] = json.loads(json.dumps(_PLANTS[next(stream, 0) % len(_PLANTS)]))
    return obj


def _tokenizer_json(data: bytes) -> None:
    from textproc import Tokenizer
    from textproc.errors import InvalidInput, TokenizerFileError

    if data[:1] == b"{":  # raw JSON text
        try:
            obj = json.loads(data)
        except (ValueError, RecursionError):
            return  # not JSON: read_json's own errors are tested in tests/fuzz
    else:  # a structured mutation of the seed (reaches far more of the loader)
        obj = _mutated_seed(data)
    try:
        tok = Tokenizer.from_json(obj, source="<atheris>")
        tok.validate()
    except TokenizerFileError as e:
        if "$" not in str(e):
            raise AssertionError(f"error without a JSON path: {e}") from e
        return
    for text in ("ab ab", "Hello wörld 😀<|im_end|>", ""):
        try:
            ids = tok.encode(text, add_special_tokens=True)
        except InvalidInput:
            continue
        tok.decode(ids)
    tok.decode([0, 1, 10**6, -1])


def _frames(data: bytes) -> None:
    from textproc import protocol as p
    from textproc.transport import FrameDecoder

    for union in (p.WorkerInFrame, p.Submit, p.EngineOutFrame, p.FrontInFrame, p.EngineInFrame,
                  p.WorkerOutFrame, p.FrontOutFrame, p.EventFrame):
        decoder: FrameDecoder[Any] = FrameDecoder(union, socket_name="atheris")
        if decoder.decode(data) is None and decoder.malformed != 1:
            raise AssertionError("a rejected frame was not counted")
    try:
        p.unpack_ids(data)
    except ValueError:
        pass


def _chat_template(data: bytes) -> None:
    from textproc.core.chat.template import RenderLimits, render_chat
    from textproc.errors import InvalidInput, TemplateError

    source = data.decode("utf-8", "replace")
    try:
        render_chat(source, [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
                    [{"type": "function", "function": {"name": "f"}}],
                    limits=RenderLimits(max_steps=100_000, timeout_s=1.0, max_output_chars=100_000))
    except (TemplateError, InvalidInput):
        pass


def _schema(data: bytes) -> None:
    import regex

    from textproc.core.constraints.schema.to_regex import json_schema_to_regex
    from textproc.errors import InvalidInput

    try:
        schema = json.loads(data)
    except (ValueError, RecursionError):
        return
    try:
        pattern = json_schema_to_regex(schema)
    except InvalidInput:
        return
    regex.compile(pattern)


_STREAM_TOK: list[Any] = []


def _stream(data: bytes) -> None:
    from textproc import Tokenizer
    from textproc.errors import InvalidInput
    from textproc.core.parsing import OutputParser
    from textproc.core.pipeline import OutputPipeline

    if not _STREAM_TOK:
        _STREAM_TOK.append(Tokenizer.from_json(json.loads(json.dumps(_SEED_TOKENIZER))))
    tok = _STREAM_TOK[0]
    text = data.decode("utf-8", "replace")
    stops_part, _, rest = text.partition("\x00")
    stops = [s for s in stops_part.split("\x01") if s][:8]
    ids = [b % (tok.vocab_size + 2) - 1 for b in data[:64]]  # includes -1 and vocab_size
    try:
        pipe = OutputPipeline(tok, stop=stops, reasoning=True, tools=True)
        for i in range(0, len(ids), 3):
            pipe.feed(ids[i:i + 3])
        pipe.finish("length")
    except InvalidInput:
        pass
    parser = OutputParser(reasoning=True, tools=True, request_id="a")
    for i in range(0, len(rest), 7):
        parser.feed(rest[i:i + 7])
    parser.finish()


TARGETS: dict[str, Callable[[bytes], None]] = {
    "tokenizer-json": _tokenizer_json,
    "frames": _frames,
    "chat-template": _chat_template,
    "schema": _schema,
    "stream": _stream,
}

SEEDS: dict[str, list[bytes]] = {
    "tokenizer-json": [json.dumps(_SEED_TOKENIZER).encode(), b"\x02\x00\x05\x03\x11"],
    "frames": [b"\x92\xa5Hello\x01", b"\x93\xaaEngineStep\x00\x91\x92\xa2r1\x91\x05"],
    "chat-template": [b"{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"],
    "schema": [b'{"type": "object", "properties": {"a": {"type": "integer", "minimum": 3}}}'],
    "stream": [b"</s>\x01\n\n\x00<think>hm</think>ok<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>"],
}


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[1] not in TARGETS:
        print(f"usage: {argv[0]} {{{'|'.join(TARGETS)}}} [libFuzzer options...]", file=sys.stderr)
        return 2
    import atheris  # the fuzz extra; imported here so the targets work without it

    import logging

    logging.basicConfig(level=logging.ERROR)  # malformed-frame warnings are expected here
    target = TARGETS[argv[1]]
    for seed in SEEDS[argv[1]]:  # imports what the target uses, then instrument it all
        target(seed)
    atheris.instrument_all()
    for seed in SEEDS[argv[1]]:
        target(seed)
    atheris.Setup([argv[0], *argv[2:]], target)
    atheris.Fuzz()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
