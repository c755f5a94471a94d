"""The tokenizer test corpus: raw UTF-8 byte strings covering the cases llama.cpp's Qwen2
pre-tokenizer distinguishes (shared by the codec tests and, later, the C runtime tests)."""

CORPUS: list[bytes] = [
    s.encode("utf-8") if isinstance(s, str) else s
    for s in [
        # code
        "def fib(n: int) -> int:\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
        "for (size_t i = 0; i < n; ++i) { out[i] = (uint8_t)(in[i] ^ 0x5A); }\r\n",
        '#include <stdio.h>\n\nint main(void) {\n\tprintf("%d\\n", 42);\n\treturn 0;\n}\n',
        "const x = {a: [1, 2, 3], 'b': \"c\"};  // comment\n/* block */ x?.a ?? null;",
        "SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC;",
        "    indented\n        more\n\n\n  trailing   \n",
        # CJK, Cyrillic, Arabic, Devanagari, Thai
        "你好，世界！今天天气很好。我们去公园散步吧。",
        "日本語のテキストとカタカナ、ひらがな。한국어 텍스트도 있습니다.",
        "Привет, мир! Съешь же ещё этих мягких французских булок, да выпей чаю.",
        "مرحبا بالعالم! هذه جملة عربية مع أرقام ١٢٣٤٥ و 678.",
        "नमस्ते दुनिया। यह एक हिंदी वाक्य है १२३।",
        "สวัสดีชาวโลก ภาษาไทยไม่มีช่องว่างระหว่างคำ",
        # emoji with ZWJ, flags, skin tones, combining marks
        "👨‍👩‍👧‍👦 family, 👩🏽‍💻 coder, 🏳️‍🌈 flag, 🇯🇵🇫🇷 flags, ❤️‍🔥",
        "e\u0301 a\u0308 n\u0303 (combining) vs é ä ñ (precomposed); Z\u0351\u0362a\u0322l\u0334g\u0315o\u0327",
        "\u0915\u094d\u0937 \u0e01\u0e34 \u05e9\u05c1\u05b8\u05dc\u05d5\u05b9\u05dd",
        # digit runs
        "1234567890 3.14159 -42 1e10 0x1F 2024-11-29 12:34:56 ١٢٣ ४५६",
        "0000000000000000000000000001",
        # whitespace mixtures
        "a\tb\nc\r\nd \u00a0e\u3000f\vg\fh",
        " \t \n \r\n \u00a0 \u3000 \v \f ",
        "word   \n\n   word\t\t\tword  \r\n\r\n",
        "   leading spaces and trailing   ",
        "\n\n\n",
        " ",
        "",
        # contractions, both cases
        "I'm you're he's she'd we've they'll it's don't can't won't",
        "I'M YOU'RE HE'S SHE'D WE'VE THEY'LL IT'S DON'T CAN'T WON'T",
        "'s 't 're 've 'm 'll 'd 'S 'T 'RE 'VE 'M 'LL 'D 'x ''",
        "rock'n'roll O'Brien ''quoted'' 'tis",
        # punctuation and symbols
        'Hello, world!!! ... ??? !!! ---> <=> ==> @#$%^&*()_+{}|:"<>?~`',
        "¡Hola! ¿Qué tal? «quotes» „quotes“ — dashes – ‘single’ “double”",
        "€100 £50 ¥1000 ₹500 ©2024 ®™ ±×÷ ∑∫√∞ ≤≥≠",
        "math: ∀x∈ℝ, x²≥0; α+β=γ",
        # mixed
        "Mixed English 中文 русский العربية हिन्दी ไทย 日本語 in one line.",
        "URL: https://example.com/path?q=1&r=2#frag and email@example.com",
        'JSON: {"key": "value", "n": [1,2,3], "nested": {"ok": true}}',
    ]
]
