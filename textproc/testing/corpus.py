"""The test and benchmark corpus: named edge cases and a deterministic >= 4 MB mixed corpus.

``EDGE_CASES`` maps a name to one hard string (some of them, like the lone surrogate, cannot
be encoded by the references at all: the suite then expects textproc to refuse them too).
``mixed_corpus(size_bytes, seed)`` returns a deterministic list of strings: source code (the
running Python's own stdlib ``.py`` files and C headers, read in a fixed order, plus
generated C/JS/Rust/Go-like snippets), English prose, sentences in more than ten other
scripts, emoji sequences, whitespace runs, digit runs, control characters, combining marks in
NFC and NFD form, characters a vocabulary never saw, special-token look-alikes inside text and
a few 50,000-character words without a space. ``mixed_corpus_items`` returns the same strings
with a source label each (mismatch messages print it). The corpus depends only on ``seed``,
``size_bytes`` and the Python stdlib files present (same Python version -> same corpus).
"""


from __future__ import annotations

import random
import sysconfig
import unicodedata
from collections.abc import Callable
from functools import lru_cache, partial
from pathlib import Path
from typing import Literal

from textproc.testing.corpus_text import (
    C_HEADERS,
    COMBINING,
    EDGE_CASES,
    EMOJI,
    LOOKALIKES,
    PROSE_EN,
    REFERENCE_REFUSES,
    SCRIPTS,
    STDLIB_FILES,
    UNSEEN_RANGES,
)

__all__ = [
    "EDGE_CASES",
    "REFERENCE_REFUSES",
    "PROSE_EN",
    "SCRIPTS",
    "mixed_corpus",
    "mixed_corpus_items",
    "fast_items",
    "mixed_text",
    "first_difference",
]


@lru_cache(maxsize=1)
def _source_files() -> tuple[tuple[str, str], ...]:
    """(label, text) of stdlib .py files and C headers, in a fixed order; missing ones skipped."""
    found: list[tuple[str, str]] = []
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for rel in STDLIB_FILES:
        path = stdlib / rel
        if path.is_file():
            found.append((f"code:py:{rel}", path.read_text(encoding="utf-8")))
    include = Path(sysconfig.get_paths()["include"])
    for rel in C_HEADERS:
        path = include / rel
        if path.is_file():
            found.append((f"code:c:{rel}", path.read_text(encoding="utf-8", errors="replace")))
    return tuple(found)


# ---------------------------------------------------------------------------------------------
# Generators: each takes a seeded RNG and returns one string


def _ident(rng: random.Random) -> str:
    words = ("count", "value", "index", "buffer", "token", "node", "item", "result", "size",
             "name", "offset", "data", "ctx", "state", "next", "prev", "cache", "key", "len")
    parts = rng.sample(words, rng.randint(1, 3))
    style = rng.randrange(3)
    if style == 0:
        return "_".join(parts)
    if style == 1:
        return parts[0] + "".join(p.title() for p in parts[1:])
    return "".join(p.title() for p in parts)


def _gen_c(rng: random.Random) -> str:
    name, arg, var = _ident(rng), _ident(rng), _ident(rng)
    n = rng.randint(2, 400)
    return (
        f"static int {name}(const char *{arg}, size_t n) {{\n"
        f"    int {var} = {rng.randint(0, 99)};\n"
        f"    for (size_t i = 0; i < n && i < {n}; ++i) {{\n"
        f"        if ({arg}[i] == '\\n') {{ {var} += 0x{rng.randint(0, 65535):04X}; }}\n"
        f"        else {var} ^= (int){arg}[i] << {rng.randint(1, 7)};\n"
        f"    }}\n    return {var}; /* {rng.choice(PROSE_EN)} */\n}}\n"
    )


def _gen_js(rng: random.Random) -> str:
    name, a, b = _ident(rng), _ident(rng), _ident(rng)
    return (
        f"export async function {name}({a}, {{ {b} = {rng.randint(0, 9)} }} = {{}}) {{\n"
        f"  const res = await fetch(`/api/v{rng.randint(1, 3)}/${{{a}}}?limit=${{{b}}}`);\n"
        f"  if (!res.ok) throw new Error(\"failed: \" + res.status);\n"
        f"  return (await res.json()).items?.map((x) => x.{b} ?? null) || [];\n}}\n"
        f"// {rng.choice(PROSE_EN)}\n"
    )


def _gen_rust(rng: random.Random) -> str:
    name, a = _ident(rng).lower(), _ident(rng).lower()
    return (
        f"pub fn {name}<'a>({a}: &'a [u8]) -> Result<Vec<u32>, Box<dyn std::error::Error>> {{\n"
        f"    let mut out = Vec::with_capacity({a}.len() / {rng.randint(2, 8)});\n"
        f"    for (i, &b) in {a}.iter().enumerate() {{\n"
        f"        match b {{\n            b'\\t' | b' ' => continue,\n"
        f"            0x80..=0xFF => out.push(u32::from(b) << {rng.randint(1, 24)}),\n"
        f"            _ => out.push(i as u32),\n        }}\n    }}\n    Ok(out)\n}}\n"
    )


def _gen_go(rng: random.Random) -> str:
    name, a = _ident(rng), _ident(rng)
    return (
        f"func {name.title()}({a} []string) (map[string]int, error) {{\n"
        f"\tm := make(map[string]int, len({a}))\n\tfor _, s := range {a} {{\n"
        f"\t\tif s == \"\" {{\n\t\t\treturn nil, fmt.Errorf(\"empty key at %d\", {rng.randint(0, 9)})\n\t\t}}\n"
        f"\t\tm[s]++\n\t}}\n\treturn m, nil\n}}\n"
    )


def _gen_shell_sql(rng: random.Random) -> str:
    table, col = _ident(rng), _ident(rng)
    return (
        f"SELECT {col}, COUNT(*) AS n FROM {table} WHERE {col} <> '' AND id > {rng.randint(0, 10**6)}\n"
        f"GROUP BY {col} ORDER BY n DESC LIMIT {rng.randint(1, 100)};\n"
        f"$ grep -rn \"{col}\" ./src | awk -F: '{{print $1}}' | sort -u > /tmp/{table}.txt\n"
    )


def _gen_prose_en(rng: random.Random) -> str:
    sentences = [rng.choice(PROSE_EN) for _ in range(rng.randint(3, 12))]
    if rng.random() < 0.2:
        sentences = [s.lower() if rng.random() < 0.5 else s.upper() for s in sentences]
    joiner = rng.choice((" ", " ", "  ", "\n", "\n\n"))
    return joiner.join(sentences)


def _gen_script(rng: random.Random, lang: str) -> str:
    pool = SCRIPTS[lang]
    sep = "" if lang in ("zh", "ja", "th") and rng.random() < 0.6 else " "
    return sep.join(rng.choice(pool) for _ in range(rng.randint(2, 10)))


def _gen_multilingual(rng: random.Random) -> str:
    langs = list(SCRIPTS)
    parts = []
    for _ in range(rng.randint(3, 10)):
        if rng.random() < 0.3:
            parts.append(rng.choice(PROSE_EN))
        else:
            parts.append(rng.choice(SCRIPTS[rng.choice(langs)]))
    return rng.choice((" ", "\n", " — ", "")).join(parts)


def _gen_emoji(rng: random.Random) -> str:
    out = []
    for _ in range(rng.randint(5, 40)):
        r = rng.random()
        if r < 0.5:
            out.append(rng.choice(EMOJI))
        elif r < 0.8:
            out.append(rng.choice(PROSE_EN).split(" ")[rng.randint(0, 3)])
        else:
            out.append(" ")
    return rng.choice(("", " ")).join(out)


def _gen_whitespace(rng: random.Random) -> str:
    pieces = (" ", "  ", "\t", "\n", "\r\n", "\r", "\u00a0", "\u3000", "\u2009", "\v", "\f")
    out = []
    for _ in range(rng.randint(5, 30)):
        out.append("".join(rng.choice(pieces) for _ in range(rng.randint(1, 12))))
        out.append(rng.choice(("word", "x", "if", "the", "1", "—", "é", "中", rng.choice(PROSE_EN))))
    return "".join(out)


def _gen_digits(rng: random.Random) -> str:
    out = []
    for _ in range(rng.randint(3, 20)):
        kind = rng.randrange(6)
        if kind == 0:
            out.append("".join(rng.choice("0123456789") for _ in range(rng.randint(1, 200))))
        elif kind == 1:
            out.append(f"{rng.uniform(-1e6, 1e6):.{rng.randint(0, 8)}f}")
        elif kind == 2:
            out.append(f"{rng.randint(0, 2**64):,}")
        elif kind == 3:
            out.append(f"0x{rng.getrandbits(64):x}")
        elif kind == 4:
            out.append("".join(chr(rng.choice((0x660, 0x966, 0xE50, 0xFF10)) + rng.randint(0, 9))
                               for _ in range(rng.randint(1, 30))))
        else:
            out.append(f"{rng.randint(1900, 2099)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}")
    return rng.choice((" ", ", ", "\n", "")).join(out)


def _gen_control(rng: random.Random) -> str:
    out = []
    for _ in range(rng.randint(5, 30)):
        if rng.random() < 0.4:
            out.append(chr(rng.choice(list(range(0, 32)) + [127] + list(range(0x80, 0xA0)))))
        else:
            out.append(rng.choice(PROSE_EN).split(" ")[0])
    return "".join(out)


def _gen_combining(rng: random.Random) -> str:
    base = rng.choice(PROSE_EN + SCRIPTS["fr"] + SCRIPTS["vi"] + SCRIPTS["de"] + SCRIPTS["ko"])
    chars = []
    for ch in base:
        chars.append(ch)
        if ch.isalpha() and rng.random() < 0.15:
            chars.extend(rng.choice(COMBINING) for _ in range(rng.randint(1, 3)))
    text = "".join(chars)
    forms: tuple[Literal["NFC", "NFD", "NFKC", "NFKD"] | None, ...] = ("NFC", "NFD", "NFKC", "NFKD", None)
    form = rng.choice(forms)
    return text if form is None else unicodedata.normalize(form, text)


def _gen_unseen(rng: random.Random) -> str:
    out = []
    for _ in range(rng.randint(3, 20)):
        lo, hi = rng.choice(UNSEEN_RANGES)
        out.append("".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 8))))
        out.append(rng.choice((" ", "a", "1", ". ", "中")))
    return "".join(out)


def _gen_lookalikes(rng: random.Random) -> str:
    words = rng.choice(PROSE_EN).split(" ")
    for _ in range(rng.randint(1, 5)):
        pos = rng.randint(0, len(words))
        token = rng.choice(LOOKALIKES)
        words.insert(pos, token if rng.random() < 0.5 else f"x{token}y")
    return rng.choice((" ", "")).join(words)


def _gen_chat_like(rng: random.Random) -> str:
    user = rng.choice(PROSE_EN)
    reply = rng.choice(PROSE_EN + SCRIPTS["zh"] + SCRIPTS["ru"])
    think = rng.choice(PROSE_EN)
    return (
        f"<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n"
        f"<|im_start|>assistant\n<think>\n{think}\n</think>\n\n{reply}<|im_end|>\n"
        f'<tool_call>\n{{"name": "f", "arguments": {{"x": {rng.randint(0, 99)}}}}}\n</tool_call>'
    )


def _gen_code_from_files(rng: random.Random) -> str:
    files = _source_files()
    if not files:
        return _gen_c(rng)
    _, text = rng.choice(files)
    lines = text.splitlines(keepends=True)
    start = rng.randrange(max(1, len(lines)))
    return "".join(lines[start : start + rng.randint(10, 60)])


_GENERATORS: tuple[tuple[str, float, Callable[[random.Random], str]], ...] = (
    ("code:file", 0.14, _gen_code_from_files),
    ("code:c", 0.03, _gen_c),
    ("code:js", 0.03, _gen_js),
    ("code:rust", 0.03, _gen_rust),
    ("code:go", 0.02, _gen_go),
    ("code:sql_shell", 0.02, _gen_shell_sql),
    ("prose:en", 0.15, _gen_prose_en),
    ("multilingual", 0.08, _gen_multilingual),
    ("emoji", 0.04, _gen_emoji),
    ("whitespace", 0.04, _gen_whitespace),
    ("digits", 0.04, _gen_digits),
    ("control", 0.02, _gen_control),
    ("combining", 0.04, _gen_combining),
    ("unseen", 0.02, _gen_unseen),
    ("lookalikes", 0.03, _gen_lookalikes),
    ("chat_like", 0.02, _gen_chat_like),
)
_SCRIPT_SHARE = 0.31  # split evenly over SCRIPTS

_LONG_WORD_CHARS = 50_000


def _long_words(rng: random.Random) -> list[tuple[str, str]]:
    latin = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(_LONG_WORD_CHARS))
    mixed = "".join(rng.choice("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
                    for _ in range(_LONG_WORD_CHARS))
    cyrillic = "".join(chr(rng.randint(0x430, 0x44F)) for _ in range(_LONG_WORD_CHARS))
    cjk = "".join(chr(rng.randint(0x4E00, 0x62FF)) for _ in range(_LONG_WORD_CHARS))
    repeat = ("token" * (_LONG_WORD_CHARS // 5 + 1))[:_LONG_WORD_CHARS]
    return [
        ("long_word:latin", latin),
        ("long_word:mixed_case", mixed),
        ("long_word:cyrillic", cyrillic),
        ("long_word:cjk", cjk),
        ("long_word:repeat", " " + repeat),
    ]


@lru_cache(maxsize=8)
def _generated(size_bytes: int, seed: int) -> tuple[tuple[str, str], ...]:
    """Generated documents until ``size_bytes``; a smaller size gives a prefix of a larger one."""
    rng = random.Random(seed)
    langs = sorted(SCRIPTS)
    choices: list[tuple[str, Callable[[random.Random], str]]] = [(n, g) for n, _, g in _GENERATORS]
    weights = [w for _, w, _ in _GENERATORS]
    for lang in langs:
        choices.append((f"script:{lang}", partial(_gen_script, lang=lang)))
        weights.append(_SCRIPT_SHARE / len(langs))
    items: list[tuple[str, str]] = []
    total = 0
    counter = 0
    while total < size_bytes:
        label, gen = rng.choices(choices, weights)[0]
        text = gen(rng)
        # glue a few generated pieces together so documents are of realistic size
        while len(text) < 200 and rng.random() < 0.8:
            text += rng.choice(("\n", " ", "\n\n")) + gen(rng)
        items.append((f"{label}#{counter}", text))
        total += len(text.encode("utf-8"))
        counter += 1
    return tuple(items)


def _edge_items() -> list[tuple[str, str]]:
    return [(f"edge:{name}", text) for name, text in EDGE_CASES.items() if name not in REFERENCE_REFUSES]


@lru_cache(maxsize=4)
def _items(size_bytes: int, seed: int) -> tuple[tuple[str, str], ...]:
    items = _long_words(random.Random(seed + 1)) + _edge_items()
    fixed = sum(len(text.encode("utf-8")) for _, text in items)
    return tuple(items) + _generated(max(0, size_bytes - fixed), seed)


def mixed_corpus_items(size_bytes: int = 4_000_000, seed: int = 0) -> list[tuple[str, str]]:
    """Deterministic (label, text) pairs totalling at least ``size_bytes`` UTF-8 bytes."""
    return list(_items(size_bytes, seed))


def mixed_corpus(size_bytes: int = 4_000_000, seed: int = 0) -> list[str]:
    """Deterministic strings totalling at least ``size_bytes`` UTF-8 bytes (see module doc)."""
    return [text for _, text in _items(size_bytes, seed)]


def fast_items(size_bytes: int = 250_000, seed: int = 0, *, long_words: bool = False) -> list[tuple[str, str]]:
    """A small labelled subset for the default test run: every edge case plus generated text.

    The generated part is a prefix of ``mixed_corpus_items``' generated documents.
    ``long_words`` adds one 50,000-character word (the latin one).
    """
    items = _edge_items() + list(_generated(size_bytes, seed))
    if long_words:
        items.insert(0, _long_words(random.Random(seed + 1))[0])
    return items


def first_difference(a: list[int] | str, b: list[int] | str) -> int:
    """Index of the first position where ``a`` and ``b`` differ (len of the shorter if a prefix)."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def mixed_text(n_chars: int, seed: int = 0) -> str:
    """At least ``n_chars`` of the generated documents (prose, code, 20+ scripts, emoji), joined
    by blank lines; no edge cases."""
    size = max(50_000, int(n_chars * 1.3))
    while True:
        docs = [t for label, t in fast_items(size, seed=seed) if not label.startswith("edge")]
        text = "\n\n".join(docs)
        if len(text) >= n_chars:
            return text
        size *= 2
