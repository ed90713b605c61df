"""``textproc text``: the text core on the command line, one JSON line per demonstration.

Owns the demo only: encode speed against the reference tokenizers (with ``identical_ids``),
per-token vs incremental decoding of an emoji sequence, a stop string streamed across deltas,
the tail of a rendered chat prompt and a parsed reasoning + tool-call answer. It reads the
vocabulary directory it is given and nothing else; reference libraries (HF ``tokenizers``,
``tiktoken``) are optional and skipped with a note when not installed. Never imported by the
rest of textproc.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
import unicodedata
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from textproc.core.chat.template import CHATML_TEMPLATE, prompt_starts_in_reasoning, render_chat
from textproc.core.deltas import merge_deltas
from textproc.core.detokenizer import IncrementalDetokenizer
from textproc.core.pipeline import OutputPipeline
from textproc.core.tokenizer import Tokenizer
from textproc.errors import TextprocError

__all__ = ["main", "sample_corpus"]

DEFAULT_MODEL = Path(__file__).resolve().parent.parent / ".cache" / "models" / "qwen3"
EMOJI_TEXT = "Family 👨‍👩‍👧, thumbs 👍🏽, flags 🇯🇵 and 😀!"
PROSE = [
    "The quick brown fox jumps over the lazy dog while the committee reviews its budget.",
    "Tokenizers turn text into integers; detokenizers turn them back, one delta at a time.",
    "Naïve café owners in Zürich serve crème brûlée façades: déjà vu.",
    "数据处理需要仔细的设计，尤其是在流式输出中。",
    "東京の天気は晴れ、気温は二十度です。",
    "Привет, как дела? Всё хорошо, спасибо.",
    "مرحبا بالعالم، هذا نص تجريبي.",
    "नमस्ते दुनिया, यह एक परीक्षण है।",
    "안녕하세요, 세계! 오늘은 좋은 날입니다.",
    "Emoji 😀🚀🎉 and ZWJ 👩‍💻 sequences 🏳️‍🌈.",
    "    indented line\twith tabs   and   runs of spaces\n\n\n",
    "Numbers: 3.14159, 2,718,281, 0xDEADBEEF, 1e-9.",
]


def sample_corpus(size_bytes: int) -> list[str]:
    """A deterministic mixed text of about ``size_bytes`` UTF-8 bytes, NFC-normalized.

    Source code (textproc's own modules, read in name order), prose in several scripts,
    emoji and whitespace runs, cut into documents of a few kilobytes.
    """
    pieces: list[str] = []
    for path in sorted(Path(__file__).resolve().parent.rglob("*.py")):
        pieces.append(path.read_text(encoding="utf-8"))
    prose = " ".join(PROSE)
    docs: list[str] = []
    total = 0
    i = 0
    while total < size_bytes:
        text = pieces[i % len(pieces)][:4000] if i % 2 == 0 else prose * 3
        text = unicodedata.normalize("NFC", text)
        docs.append(text)
        total += len(text.encode("utf-8"))
        i += 1
    return docs


def _line(obj: dict[str, Any]) -> None:
    print(json.dumps(obj, ensure_ascii=False), flush=True)


def _timed(encode: Callable[[str], list[int]], docs: Sequence[str]) -> tuple[float, list[list[int]]]:
    t0 = time.perf_counter()
    ids = [encode(d) for d in docs]
    return time.perf_counter() - t0, ids


def _split_regex(obj: Any) -> str | None:
    # the first Split pre-tokenizer regex in tokenizer.json (the tiktoken pattern)
    if isinstance(obj, dict):
        if obj.get("type") == "Split" and isinstance(obj.get("pattern"), dict):
            regex = obj["pattern"].get("Regex")
            if isinstance(regex, str):
                return regex
        for value in obj.values():
            found = _split_regex(value)
            if found:
                return found
    elif isinstance(obj, list):
        for value in obj:
            found = _split_regex(value)
            if found:
                return found
    return None


def _references(model_dir: Path, tok: Any) -> list[tuple[str, Callable[[str], list[int]] | None, str]]:
    """(name, encode or None, note) for each reference tokenizer."""
    refs: list[tuple[str, Callable[[str], list[int]] | None, str]] = []
    try:
        tokenizers = importlib.import_module("tokenizers")
    except ImportError:
        refs.append(("tokenizers", None, "not installed"))
    else:
        hf = tokenizers.Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        refs.append(
            ("tokenizers", lambda s: list(hf.encode(s, add_special_tokens=False).ids), "Rust, one thread")
        )
    rank_files = sorted(model_dir.glob("*.tiktoken"))
    if not rank_files:
        refs.append(("tiktoken", None, f"no *.tiktoken rank file in {model_dir.name}"))
        return refs
    try:
        tiktoken = importlib.import_module("tiktoken")
        load = importlib.import_module("tiktoken.load")
    except ImportError:
        refs.append(("tiktoken", None, "not installed"))
        return refs
    obj = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))
    pattern = _split_regex(obj.get("pre_tokenizer"))
    if pattern is None:
        refs.append(("tiktoken", None, "no Split regex in tokenizer.json"))
        return refs
    ranks = load.load_tiktoken_bpe(str(rank_files[0]))
    specials = {k: v for k, v in tok.added_tokens.items() if k.encode() not in ranks}
    enc = tiktoken.Encoding(model_dir.name, pat_str=pattern, mergeable_ranks=ranks, special_tokens=specials)
    refs.append(
        (
            "tiktoken",
            lambda s: list(enc.encode(s, allowed_special="all")),
            f"Rust, one thread, {rank_files[0].name}, added tokens as special",
        )
    )
    return refs


def demo_encode(tok: Any, model_dir: Path, size_bytes: int) -> dict[str, Any]:
    docs = sample_corpus(size_bytes)
    n_bytes = sum(len(d.encode("utf-8")) for d in docs)
    tok.encode(docs[0])  # warm caches the way a worker would be warm
    seconds, ids = _timed(tok.encode, docs)
    n_tokens = sum(map(len, ids))
    result: dict[str, Any] = {
        "demo": "encode",
        "model": model_dir.name,
        "documents": len(docs),
        "bytes": n_bytes,
        "tokens": n_tokens,
        "textproc_tokens_per_s": round(n_tokens / seconds),
        "references": [],
    }
    for name, encode, note in _references(model_dir, tok):
        if encode is None:
            result["references"].append({"name": name, "skipped": note})
            continue
        encode(docs[0])
        ref_seconds, ref_ids = _timed(encode, docs)
        same = sum(a == b for a, b in zip(ids, ref_ids))
        result["references"].append(
            {
                "name": name,
                "note": note,
                "tokens_per_s": round(sum(map(len, ref_ids)) / ref_seconds),
                "textproc_speedup": round(ref_seconds / seconds, 2),
                "identical_ids": same == len(docs),
                "identical_documents": f"{same}/{len(docs)}",
            }
        )
    return result


def demo_emoji(tok: Any) -> dict[str, Any]:
    ids = tok.encode(EMOJI_TEXT)
    per_token = [tok.decode([i]) for i in ids]
    d = IncrementalDetokenizer(tok, at_start=True)
    incremental = [d.feed([i]) for i in ids] + [d.finish()]
    return {
        "demo": "decode_emoji",
        "text": EMOJI_TEXT,
        "n_tokens": len(ids),
        "per_token_decode": "".join(per_token),
        "per_token_replacements": sum(t.count("\ufffd") for t in per_token),
        "incremental_deltas": incremental,
        "incremental_replacements": sum(t.count("\ufffd") for t in incremental),
        "incremental_equals_decode": "".join(incremental) == tok.decode(ids, skip_special_tokens=True),
    }


def demo_stop(tok: Any) -> dict[str, Any]:
    text = "The answer is 42.\n\nUser: and now something else"
    stops = ["\n\nUser:", "###"]
    ids = tok.encode(text)
    pipeline = OutputPipeline(tok, stop=stops, at_start=True)
    steps = [ids[i : i + 2] for i in range(0, len(ids), 2)]
    released: list[dict[str, Any]] = []
    for step in steps:
        out = pipeline.feed(step)
        released.append({"in": tok.decode(step), "out": "".join(f.get("content", "") for f in out)})
        if pipeline.is_finished:
            break
    pipeline.finish("length")
    return {
        "demo": "stop_string",
        "stops": stops,
        "deltas": released,
        "finish_reason": pipeline.finish_reason,
        "matched_stop": pipeline.matched_stop,
        "completion_tokens": pipeline.n_tokens,
    }


MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What's the weather in Paris? Answer in °C."},
]
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
                "required": ["city"],
            },
        },
    }
]
ANSWER = (  # after the prompt; "<think>\n" is prepended when the prompt did not open it
    "The user wants the weather in Paris in Celsius; I should call the tool.\n</think>\n\n"
    "Let me check that for you.\n"
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}\n</tool_call>'
)


def demo_chat(tok: Any) -> tuple[dict[str, Any], str]:
    template = tok.chat_template or CHATML_TEMPLATE
    prompt = render_chat(
        template,
        MESSAGES,
        TOOLS,
        add_generation_prompt=True,
        enable_thinking=True,
        **tok.special_tokens_map,
    )
    return (
        {
            "demo": "chat_prompt",
            "template": "model" if tok.chat_template else "CHATML_TEMPLATE",
            "prompt_chars": len(prompt),
            "prompt_tokens": len(tok.encode(prompt)),
            "tail": prompt[-160:],
            "starts_in_reasoning": prompt_starts_in_reasoning(prompt),
        },
        prompt,
    )


def demo_parse(tok: Any, prompt: str) -> dict[str, Any]:
    # Qwen3's template leaves the think block to the model; a template that pre-fills
    # "<think>\n" starts the output inside reasoning: the prompt says which
    in_reasoning = prompt_starts_in_reasoning(prompt)
    answer = ANSWER if in_reasoning else "<think>\n" + ANSWER
    ids = tok.encode(answer)
    pipeline = OutputPipeline(
        tok, reasoning=True, tools=True, starts_in_reasoning=in_reasoning, request_id="demo"
    )
    deltas: list[dict[str, Any]] = []
    for i in range(0, len(ids), 3):  # three tokens per step, as speculative decoding gives
        deltas += pipeline.feed(ids[i : i + 3])
    deltas += pipeline.finish("stop")
    return {
        "demo": "parsed_answer",
        "starts_in_reasoning": in_reasoning,
        "raw": answer,
        "n_deltas": len(deltas),
        "first_deltas": deltas[:3],
        "merged": merge_deltas(deltas),
        "finish_reason": pipeline.finish_reason,
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo; prints JSON lines. Returns 0, or 2 when the vocabulary is missing."""
    parser = argparse.ArgumentParser(prog="textproc text", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model-dir",
        type=Path,
        default=DEFAULT_MODEL,
        help="directory with tokenizer.json (+ tokenizer_config.json); "
        "default: the qwen3 fixture built by scripts/fetch_fixtures.py",
    )
    parser.add_argument("--bytes", type=int, default=1_000_000, help="text size for the encode demo")
    parser.add_argument(
        "--only",
        choices=["encode", "emoji", "stop", "chat", "parse"],
        action="append",
        help="run only these demos (repeatable)",
    )
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    model_dir: Path = args.model_dir
    if not (model_dir / "tokenizer.json").is_file():
        print(
            f"textproc text: no tokenizer.json in {str(model_dir)!r}; pass --model-dir DIR or "
            "build the fixtures with scripts/fetch_fixtures.py",
            file=sys.stderr,
        )
        return 2
    try:
        tok = Tokenizer.from_dir(model_dir)
    except TextprocError as e:
        print(f"textproc text: {e}", file=sys.stderr)
        return 2
    only = set(args.only or ["encode", "emoji", "stop", "chat", "parse"])
    if "encode" in only:
        _line(demo_encode(tok, model_dir, args.bytes))
    if "emoji" in only:
        _line(demo_emoji(tok))
    if "stop" in only:
        _line(demo_stop(tok))
    prompt = ""
    if "chat" in only or "parse" in only:
        chat, prompt = demo_chat(tok)
        if "chat" in only:
            _line(chat)
    if "parse" in only:
        _line(demo_parse(tok, prompt))
    return 0
