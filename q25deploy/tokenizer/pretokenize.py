"""llama.cpp's Qwen2 pre-tokenizer, driven by a code point class table.

The Qwen2 expression
``(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}``
``| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+`` is evaluated as llama.cpp's
hand-written scanner does it (``unicode_regex_split_custom_qwen2``): rule by rule at each
position, with the class flags of :mod:`q25deploy.tokenizer.unicode_classes`.

Input bytes are first decoded the way llama.cpp does (``unicode_cpts_from_utf8``): a lead
byte with the right number of continuation bytes gives its code point (overlong forms and
surrogates included); anything else gives U+FFFD for that one byte. Where llama.cpp would
throw (a 4-byte form above U+10FFFF) we also give U+FFFD per byte.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence

from .unicode_classes import LETTER, NUMBER, WHITESPACE

CR, LF, SPACE, APOS = 0x0D, 0x0A, 0x20, 0x27
_WLN = WHITESPACE | LETTER | NUMBER
_CONTRACT1 = frozenset(b"stmdSTMD")
_CONTRACT2 = frozenset({b"re", b"ve", b"ll"})


def decode_lenient(data: bytes) -> list[int]:
    """Code points of ``data`` exactly as llama.cpp's ``unicode_cpts_from_utf8`` reads them."""
    try:
        return [ord(c) for c in data.decode("utf-8")]
    except UnicodeDecodeError:
        pass
    out = []
    n = len(data)
    i = 0
    while i < n:
        b0 = data[i]
        if b0 < 0x80:
            out.append(b0)
            i += 1
            continue
        need = 0
        if b0 & 0x40 == 0:
            need = -1
        elif b0 & 0x20 == 0:
            need, cp = 1, b0 & 0x1F
        elif b0 & 0x10 == 0:
            need, cp = 2, b0 & 0x0F
        elif b0 & 0x08 == 0:
            need, cp = 3, b0 & 0x07
        else:
            need = -1
        if need > 0 and i + need < n and all(data[i + k] & 0xC0 == 0x80 for k in range(1, need + 1)):
            for k in range(1, need + 1):
                cp = (cp << 6) | (data[i + k] & 0x3F)
            if cp <= 0x10FFFF:
                out.append(cp)
                i += need + 1
                continue
        out.append(0xFFFD)
        i += 1
    return out


def encode_cpts(cpts: Sequence[int]) -> bytes:
    """UTF-8 of code points, surrogates included (llama.cpp's unicode_cpt_to_utf8)."""
    return "".join(map(chr, cpts)).encode("utf-8", "surrogatepass")


class ClassTable:
    """Code point → flags lookup over (first, flags) ranges, memoised per code point."""

    def __init__(self, ranges: Sequence[tuple[int, int]]) -> None:
        self._firsts = [r[0] for r in ranges]
        self._flags = [r[1] for r in ranges]
        self._cache: dict[int, int] = {}
        for cp in range(128):
            self._cache[cp] = self._lookup(cp)

    def _lookup(self, cp: int) -> int:
        return self._flags[bisect_right(self._firsts, cp) - 1]

    def flags_of(self, cpts: Sequence[int]) -> list[int]:
        cache = self._cache
        out = []
        for cp in cpts:
            f = cache.get(cp)
            if f is None:
                f = cache[cp] = self._lookup(cp)
            out.append(f)
        return out


def split_qwen2(cpts: Sequence[int], flags: Sequence[int]) -> list[tuple[int, int]]:
    """Pre-token spans [start, end) over ``cpts`` (one fragment of text)."""
    n = len(cpts)
    spans = []
    prev = 0
    pos = 0

    def F(p: int) -> int:
        return flags[p] if p < n else 0

    while pos < n:  # the rules in the expression's order; the first that matches ends a span
        cpt = cpts[pos]
        fl = flags[pos]
        if cpt == APOS and pos + 1 < n and (end := _contraction_end(cpts, pos, n)):  # (?i:'s|'t|'re|'ve|'m|'ll|'d)
            spans.append((prev, end))
            prev = pos = end
            continue
        if not (cpt == CR or cpt == LF or fl & NUMBER):  # [^\r\n\p{L}\p{N}]?\p{L}+
            if fl & LETTER or F(pos + 1) & LETTER:
                pos += 1
                while pos < n and flags[pos] & LETTER:
                    pos += 1
                spans.append((prev, pos))
                prev = pos
                continue
        if fl & NUMBER:  # \p{N}
            pos += 1
            spans.append((prev, pos))
            prev = pos
            continue
        fl2 = F(pos + 1) if cpt == SPACE else fl  # <space>?[^\s\p{L}\p{N}]+[\r\n]*
        if not (fl2 & _WLN) and fl:
            if cpt == SPACE:
                pos += 1
            while not (fl2 & _WLN) and fl2:
                pos += 1
                fl2 = F(pos)
            while pos < n and (cpts[pos] == CR or cpts[pos] == LF):
                pos += 1
            spans.append((prev, pos))
            prev = pos
            continue
        nws = 0  # whitespace runs
        last_rn = 0
        while F(pos + nws) & WHITESPACE:
            c = cpts[pos + nws]
            if c == CR or c == LF:
                last_rn = pos + nws + 1
            nws += 1
        if last_rn > 0:  # \s*[\r\n]+
            pos = last_rn
        elif nws > 1 and pos + nws < n:  # \s+(?!\S)
            pos += nws - 1
        elif nws > 0:  # \s+
            pos += nws
        else:  # no rule matched: one code point
            pos += 1
        spans.append((prev, pos))
        prev = pos
    return spans


def _contraction_end(cpts: Sequence[int], pos: int, n: int) -> int:
    """Where an ASCII-case-insensitive 's 't 're 've 'm 'll 'd at ``pos`` ends, or 0 if none does."""
    c1 = cpts[pos + 1]
    if c1 < 128 and c1 in _CONTRACT1:
        return pos + 2
    if pos + 2 < n:
        c2 = cpts[pos + 2]
        if c1 < 128 and c2 < 128 and bytes((c1 | 0x20, c2 | 0x20)) in _CONTRACT2:
            return pos + 3
    return 0
