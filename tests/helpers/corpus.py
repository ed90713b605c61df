"""Test corpus for tokenizer exactness: named edge cases and a deterministic >= 4 MB mixed corpus.

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
from functools import lru_cache
from pathlib import Path

__all__ = [
    "EDGE_CASES",
    "REFERENCE_REFUSES",
    "PROSE_EN",
    "SCRIPTS",
    "mixed_corpus",
    "mixed_corpus_items",
    "fast_items",
    "first_difference",
]

# ---------------------------------------------------------------------------------------------
# Named edge cases

_LOOKALIKES = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<s>",
    "</s>",
    "<unk>",
    "<|fim_prefix|>",
    "<|endoftext|",
    "<|im_start",
    "|>",
    "<|",
    "<0x0A>",
    "[INST]",
    "▁",
)

EDGE_CASES: dict[str, str] = {
    "empty": "",
    "one_space": " ",
    "one_char": "a",
    "spaces_run": " " * 37,
    "tabs_run": "\t\t\t\tx\t\t",
    "mixed_whitespace": " \t \n\n \r\n\u00a0\u2003\u3000 x  \n",
    "crlf_lines": "line one\r\nline two\r\n\r\n  indented\r\n",
    "trailing_spaces": "trailing spaces here   \nand a tab\t\nend   ",
    "leading_spaces": "     leading",
    "newlines_only": "\n\n\n\n",
    "composed_accents": unicodedata.normalize("NFC", "café naïve résumé Ångström ñandú façade"),
    "decomposed_accents": unicodedata.normalize("NFD", "café naïve résumé Ångström ñandú façade"),
    "hangul_nfd": unicodedata.normalize("NFD", "한국어 텍스트를 분해합니다"),
    "combining_stack": "e\u0301\u0302\u0303\u0304 a\u0308\u0331 Z\u0335\u0336\u0337",
    "emoji_zwj": "👨‍👩‍👧‍👦 👩🏽‍💻 🧑‍🤝‍🧑 🏳️‍🌈 👁️‍🗨️",
    "emoji_flags": "🇺🇸🇫🇷🇯🇵🇧🇷🇮🇳 🏴\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f",
    "emoji_skin_tones": "👋🏻👋🏼👋🏽👋🏾👋🏿 👍🏿 🤝🏻",
    "emoji_keycaps": "1️⃣ 2️⃣ #️⃣ *️⃣ ❤️ ☺︎",
    "cjk": "中华人民共和国成立于1949年。東京都は日本の首都です。",
    "japanese_kana": "ひらがなとカタカナ、そして漢字を混ぜた文章です。ｶﾀｶﾅ",
    "korean": "대한민국의 수도는 서울입니다. 안녕하세요!",
    "rtl_arabic": "مرحبا بالعالم! هذه جملة باللغة العربية ١٢٣٤٥.",
    "rtl_hebrew": "שלום עולם, זה משפט בעברית.",
    "bidi_controls": "abc \u202edcba\u202c \u2067xyz\u2069 \u200e\u200f",
    "python_code": 'def f(x: int) -> int:\n    """Doc."""\n    return x ** 2  # square\n\n\nprint(f(3))\n',
    "c_code": "#include <stdio.h>\nint main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
    "js_code": "const f = (a, b) => { return a?.b ?? `${b}`; };\n// comment\n",
    "json_blob": '{"a": [1, 2.5e-3, null, true], "b": {"c": "d\\u00e9"}}',
    "url_and_email": "see https://example.com/path?q=1&r=%20x#frag or mail me@example.org",
    "lone_surrogate": "abc\ud800def",
    "lone_low_surrogate": "\udfff",
    "repeated_char_10k": "a" * 10_000,
    "repeated_space_10k": " " * 10_000,
    "repeated_cjk_10k": "字" * 10_000,
    "repeated_emoji": "😀" * 2_000,
    "special_token_exact": "<|endoftext|>",
    "special_tokens_in_text": "Hello <|im_start|>user\nhi<|im_end|> and <|endoftext|> then <think>x</think>",
    "special_token_lookalikes": " ".join(_LOOKALIKES) + " <|im_start |> < |im_end|> <|IM_END|>",
    "special_tokens_adjacent": "<|im_end|><|im_end|><s></s><unk><think></think>",
    "sentencepiece_controls": "<s>Hello</s> <unk> [INST] hi [/INST]",
    "special_then_combining": "<|im_end|>\u0338 x<think>\u0301",
    "control_chars": "a\x00b\x01c\x07d\x08e\x0bf\x0cg\x1bh\x7fi\x85j\x9f",
    "nul_only": "\x00\x00\x00",
    "long_digits": "3141592653589793238462643383279502884197169399375105820974944592" * 20,
    "digits_mixed": "1,234,567.89 0x1F 1e-10 ١٢٣ ४५६ ๑๒๓ ①②③ ½ ²³",
    "contractions_lower": "i'm you're he's we'll they'd it's don't can't shouldn't y'all",
    "contractions_upper": "I'M YOU'RE HE'S WE'LL THEY'D IT'S DON'T CAN'T SHOULDN'T Y'ALL",
    "contractions_mixed": "I'm You'Re HE's wE'Ll 'S 'd' ’s ’t",
    "punctuation_runs": "!!!??? ... --- *** ((( ))) ;;; ::: ,,, \"\"\" '''",
    "unseen_chars": "\U00012000\U00012001 \U0001d11e \U00010330\U00010331 \ue000\uf8ff \U000f0000",
    "noncharacters": "\ufdd0\ufffe\U0001fffe x",
    "replacement_char": "bad \ufffd byte",
    "bom_and_zero_width": "\ufeffstart\u200bmiddle\u200cjoin\u200dend\u2060",
    "fullwidth": "ＦＵＬＬＷＩＤＴＨ　ｔｅｘｔ　１２３",
    "math_symbols": "∀x∈ℝ: ∑ᵢ xᵢ² ≤ ∫₀^∞ e^{-t} dt ≠ ∞ ≮ ≯",
    "unicode_16_letters": "\U00010d4a\U00010d4b\U00010d4c \U00016d43\U00016d44 \U000105c0\U000105c1 abc",
    "unicode_17_letters": "\U00010940\U00010941 \U00011db0\U00011db1 \U00016ea0\U00016ea1 abc",
    "unassigned": "\U0002fffd \U000e0080 \u0378",
    "greek_final_sigma": "ΟΔΥΣΣΕΥΣ οδυσσευς Σίσυφος",
    "turkish_i": "İstanbul ıIiİ",
    "thai_no_spaces": "ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ",
    "devanagari": "नमस्ते दुनिया, यह हिन्दी का वाक्य है।",
    "mixed_scripts_word": "abcабвαβγ中文ひらがな123",
    "metaspace_char": "▁already▁has▁metaspace ▁",
    "byte_lookalike": "<0x41><0xFF> <0x0A>",
    "space_before_newline": "a \nb  \n\nc   \r\n",
}

# Strings the references cannot encode (HF tokenizers and tiktoken raise on lone surrogates);
# textproc must refuse them with InvalidInput instead of producing ids.
REFERENCE_REFUSES: frozenset[str] = frozenset({"lone_surrogate", "lone_low_surrogate"})

# ---------------------------------------------------------------------------------------------
# Real sentences

PROSE_EN: tuple[str, ...] = (
    "The quick brown fox jumps over the lazy dog.",
    "It was the best of times, it was the worst of times, it was the age of wisdom.",
    "Call me Ishmael. Some years ago, never mind how long precisely, I thought I would sail about a little.",
    "A tokenizer turns text into a sequence of integers that a language model can read.",
    "Please don't forget to bring your umbrella; the forecast says it'll rain after 3 p.m.",
    "She said, \"We're not going to make it by Friday,\" and nobody argued.",
    "The committee approved the budget of $4.2 million for the 2025–2026 fiscal year.",
    "In 1969, Apollo 11 landed on the Moon, and Neil Armstrong stepped onto its surface.",
    "Water boils at 100 degrees Celsius at sea level, but at lower temperatures in the mountains.",
    "Most of the library's rare books are kept in a climate-controlled room on the third floor.",
    "He hadn't seen the email until Monday morning, when it was already too late to reply.",
    "The museum's new exhibition features paintings, sculptures, and early photographs.",
    "Trains leave every fifteen minutes during rush hour and every half hour at night.",
    "If you can't explain it simply, you don't understand it well enough.",
    "They've been working on the bridge since April; it's expected to open next spring.",
    "I'd rather walk than wait for the bus, especially when the weather is this nice.",
    "The function returns None when the key is missing, so check the result before using it.",
    "Our server handles thousands of requests per second with a median latency under 20 ms.",
    "THE SIGN SAID: DO NOT ENTER. WE'LL SEE ABOUT THAT, HE THOUGHT.",
    "Dr. Smith, Mrs. O'Brien and Prof. García met at 9:30 a.m. on Jan. 5th.",
)

SCRIPTS: dict[str, tuple[str, ...]] = {
    "zh": (
        "今天天气很好，我们一起去公园散步吧。",
        "北京是中国的首都，有着悠久的历史和文化。",
        "学习一门新的语言需要时间和耐心。",
        "这家餐厅的饺子非常好吃，价格也很合理。",
        "科学技术的发展改变了人们的生活方式。",
    ),
    "ja": (
        "今日はとても良い天気ですね。",
        "東京駅から新幹線で大阪まで約二時間半かかります。",
        "私は毎朝コーヒーを飲みながらニュースを読みます。",
        "この本はとても面白いので、ぜひ読んでみてください。",
        "カタカナで書かれた言葉の多くは外来語です。",
    ),
    "ko": (
        "오늘은 날씨가 정말 좋네요.",
        "서울은 대한민국의 수도이자 가장 큰 도시입니다.",
        "저는 매일 아침 운동을 하고 출근합니다.",
        "한글은 세종대왕이 만든 문자입니다.",
        "이 식당의 김치찌개는 정말 맛있어요.",
    ),
    "ru": (
        "Москва — столица Российской Федерации.",
        "Сегодня хорошая погода, пойдём гулять в парк.",
        "Я читаю интересную книгу о истории науки.",
        "Поезд отправляется ровно в девять часов утра.",
        "Зимой в Сибири бывает очень холодно.",
    ),
    "uk": (
        "Київ — столиця України.",
        "Дякую за допомогу, це було дуже корисно.",
        "Їжак шукає яблука під старою грушею.",
    ),
    "ar": (
        "القاهرة هي عاصمة جمهورية مصر العربية.",
        "أحب قراءة الكتب في المساء.",
        "اللغة العربية من أكثر اللغات انتشارا في العالم.",
        "ذهبنا إلى السوق لشراء الخضار والفواكه.",
        "مَرْحَبًا بِكُمْ فِي بَيْتِنَا.",
    ),
    "he": (
        "ירושלים היא עיר עתיקה וחשובה.",
        "אני לומד עברית כבר שנתיים.",
        "מזג האוויר היום נעים מאוד.",
        "הספרייה פתוחה מיום ראשון עד יום חמישי.",
    ),
    "hi": (
        "भारत एक विशाल और विविधतापूर्ण देश है।",
        "मुझे सुबह चाय पीना पसंद है।",
        "दिल्ली भारत की राजधानी है।",
        "हमें अपने पर्यावरण की रक्षा करनी चाहिए।",
        "यह पुस्तक बहुत रोचक है।",
    ),
    "th": (
        "กรุงเทพมหานครเป็นเมืองหลวงของประเทศไทย",
        "วันนี้อากาศดีมาก เราไปเที่ยวทะเลกันเถอะ",
        "ฉันชอบกินข้าวผัดกับต้มยำกุ้ง",
        "ภาษาไทยมีพยัญชนะสี่สิบสี่ตัว",
    ),
    "el": (
        "Η Αθήνα είναι η πρωτεύουσα της Ελλάδας.",
        "Καλημέρα σας, τι κάνετε σήμερα;",
        "Η φιλοσοφία γεννήθηκε στην αρχαία Ελλάδα.",
        "Το καλοκαίρι πηγαίνουμε συχνά στη θάλασσα.",
    ),
    "tr": (
        "İstanbul, Türkiye'nin en kalabalık şehridir.",
        "Bugün hava çok güzel, dışarı çıkalım mı?",
        "Çocuklar bahçede ağaçların altında oynuyor.",
    ),
    "vi": (
        "Hà Nội là thủ đô của nước Cộng hòa Xã hội chủ nghĩa Việt Nam.",
        "Tôi thích uống cà phê sữa đá vào buổi sáng.",
        "Tiếng Việt có sáu thanh điệu khác nhau.",
    ),
    "ka": (
        "თბილისი საქართველოს დედაქალაქია.",
        "დღეს ძალიან ლამაზი ამინდია.",
    ),
    "hy": (
        "Երևանը Հայաստանի մայրաքաղաքն է։",
        "Այսօր եղանակը շատ լավ է։",
    ),
    "bn": (
        "ঢাকা বাংলাদেশের রাজধানী।",
        "আমি প্রতিদিন সকালে বই পড়ি।",
    ),
    "ta": (
        "சென்னை தமிழ்நாட்டின் தலைநகரம்.",
        "நான் தினமும் காலையில் நடக்கிறேன்.",
    ),
    "am": (
        "አዲስ አበባ የኢትዮጵያ ዋና ከተማ ናት።",
        "ዛሬ የአየሩ ሁኔታ ጥሩ ነው።",
    ),
    "fa": (
        "تهران پایتخت ایران است.",
        "من هر روز صبح چای می‌نوشم.",
    ),
    "de": (
        "Die Straße führt über die Brücke zum Bahnhof.",
        "Größere Änderungen müssen vorher genehmigt werden.",
        "Ich möchte gern einen Kaffee mit Milch, bitte.",
    ),
    "fr": (
        "L'été dernier, nous sommes allés à la mer avec nos enfants.",
        "Où est la bibliothèque la plus proche, s'il vous plaît ?",
        "Le cœur a ses raisons que la raison ne connaît point.",
    ),
    "es": (
        "¿Dónde está la estación de tren? Está a la izquierda.",
        "El niño comió una manzana y bebió un vaso de leche.",
        "Mañana vamos a visitar a mis abuelos en el campo.",
    ),
    "pl": (
        "Zażółć gęślą jaźń — to zdanie zawiera wszystkie polskie litery.",
        "Warszawa jest stolicą Polski.",
    ),
    "my": (
        "မြန်မာနိုင်ငံ၏ မြို့တော်မှာ နေပြည်တော် ဖြစ်သည်။",
    ),
    "km": (
        "ភ្នំពេញ គឺជារាជធានីនៃប្រទេសកម្ពុជា។",
    ),
}

_EMOJI = (
    "😀", "😂", "🥲", "😍", "🤔", "🙃", "😭", "🔥", "✨", "🎉", "🚀", "💡", "✅", "❌", "⚠️",
    "👍", "👍🏽", "👋🏿", "🙏🏻", "💪🏾", "👩‍💻", "👨‍👩‍👧‍👦", "👩‍❤️‍👨", "🏳️‍🌈", "🏴‍☠️",
    "🇺🇸", "🇩🇪", "🇯🇵", "🇧🇷", "🇮🇳", "🇰🇷", "🇺🇦", "🧑🏾‍🚀", "🐈‍⬛", "❤️‍🔥", "1️⃣", "©️", "™️",
    "🫠", "🪿", "🫎",
)

_COMBINING = ("\u0300", "\u0301", "\u0302", "\u0303", "\u0308", "\u030a", "\u0327", "\u0328",
              "\u0331", "\u0323", "\u0338", "\u20d7", "\u0345")

_UNSEEN_RANGES = (
    (0x12000, 0x12399),  # cuneiform
    (0x13000, 0x1342E),  # egyptian hieroglyphs
    (0x10330, 0x1034A),  # gothic
    (0x1D100, 0x1D126),  # musical symbols
    (0xA000, 0xA48C),  # yi syllables
    (0x1680, 0x169C),  # ogham
    (0x16A0, 0x16F0),  # runic
    (0xE000, 0xE0FF),  # private use
    (0x1F700, 0x1F773),  # alchemical symbols
    (0x10000, 0x1005D),  # linear b
    (0x2800, 0x28FF),  # braille
)

_STDLIB_FILES = (
    "json/__init__.py", "json/decoder.py", "json/encoder.py", "textwrap.py", "difflib.py",
    "string.py", "heapq.py", "bisect.py", "fractions.py", "statistics.py", "dataclasses.py",
    "enum.py", "functools.py", "argparse.py", "shlex.py", "csv.py", "base64.py", "colorsys.py",
    "calendar.py", "pprint.py", "tokenize.py", "ast.py", "html/parser.py", "email/utils.py",
    "urllib/parse.py", "http/cookies.py", "unittest/case.py", "asyncio/queues.py", "sched.py",
    "locale.py", "gettext.py", "graphlib.py", "this.py", "keyword.py",
)

_C_HEADERS = (
    "Python.h", "object.h", "listobject.h", "dictobject.h", "unicodeobject.h", "longobject.h",
    "abstract.h", "pymem.h", "pyport.h", "ceval.h",
)


@lru_cache(maxsize=1)
def _source_files() -> tuple[tuple[str, str], ...]:
    """(label, text) of stdlib .py files and C headers, in a fixed order; missing ones skipped."""
    found: list[tuple[str, str]] = []
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for rel in _STDLIB_FILES:
        path = stdlib / rel
        if path.is_file():
            found.append((f"code:py:{rel}", path.read_text(encoding="utf-8")))
    include = Path(sysconfig.get_paths()["include"])
    for rel in _C_HEADERS:
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
            out.append(rng.choice(_EMOJI))
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
            chars.extend(rng.choice(_COMBINING) for _ in range(rng.randint(1, 3)))
    text = "".join(chars)
    form = rng.choice(("NFC", "NFD", "NFKC", "NFKD", "raw"))
    return text if form == "raw" else unicodedata.normalize(form, text)


def _gen_unseen(rng: random.Random) -> str:
    out = []
    for _ in range(rng.randint(3, 20)):
        lo, hi = rng.choice(_UNSEEN_RANGES)
        out.append("".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 8))))
        out.append(rng.choice((" ", "a", "1", ". ", "中")))
    return "".join(out)


def _gen_lookalikes(rng: random.Random) -> str:
    words = rng.choice(PROSE_EN).split(" ")
    for _ in range(rng.randint(1, 5)):
        pos = rng.randint(0, len(words))
        token = rng.choice(_LOOKALIKES)
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
        choices.append((f"script:{lang}", lambda r, lang=lang: _gen_script(r, lang)))
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
