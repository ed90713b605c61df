"""The named strings of the test corpus: edge cases, real sentences in 20+ scripts, emoji,
combining marks, unseen ranges and the stdlib files read as source code.

Data only; ``textproc.testing.corpus`` builds the documents from it.
"""

from __future__ import annotations

import unicodedata

__all__ = ["EDGE_CASES", "REFERENCE_REFUSES", "PROSE_EN", "SCRIPTS", "LOOKALIKES", "EMOJI",
           "COMBINING", "UNSEEN_RANGES", "STDLIB_FILES", "C_HEADERS"]

# ---------------------------------------------------------------------------------------------
# Named edge cases

LOOKALIKES = (
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
    "special_token_lookalikes": " ".join(LOOKALIKES) + " <|im_start |> < |im_end|> <|IM_END|>",
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

EMOJI = (
    "😀", "😂", "🥲", "😍", "🤔", "🙃", "😭", "🔥", "✨", "🎉", "🚀", "💡", "✅", "❌", "⚠️",
    "👍", "👍🏽", "👋🏿", "🙏🏻", "💪🏾", "👩‍💻", "👨‍👩‍👧‍👦", "👩‍❤️‍👨", "🏳️‍🌈", "🏴‍☠️",
    "🇺🇸", "🇩🇪", "🇯🇵", "🇧🇷", "🇮🇳", "🇰🇷", "🇺🇦", "🧑🏾‍🚀", "🐈‍⬛", "❤️‍🔥", "1️⃣", "©️", "™️",
    "🫠", "🪿", "🫎",
)

COMBINING = ("\u0300", "\u0301", "\u0302", "\u0303", "\u0308", "\u030a", "\u0327", "\u0328",
              "\u0331", "\u0323", "\u0338", "\u20d7", "\u0345")

UNSEEN_RANGES = (
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

STDLIB_FILES = (
    "json/__init__.py", "json/decoder.py", "json/encoder.py", "textwrap.py", "difflib.py",
    "string.py", "heapq.py", "bisect.py", "fractions.py", "statistics.py", "dataclasses.py",
    "enum.py", "functools.py", "argparse.py", "shlex.py", "csv.py", "base64.py", "colorsys.py",
    "calendar.py", "pprint.py", "tokenize.py", "ast.py", "html/parser.py", "email/utils.py",
    "urllib/parse.py", "http/cookies.py", "unittest/case.py", "asyncio/queues.py", "sched.py",
    "locale.py", "gettext.py", "graphlib.py", "this.py", "keyword.py",
)

C_HEADERS = (
    "Python.h", "object.h", "listobject.h", "dictobject.h", "unicodeobject.h", "longobject.h",
    "abstract.h", "pymem.h", "pyport.h", "ceval.h",
)

