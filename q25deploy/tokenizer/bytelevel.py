"""GPT-2's ``bytes_to_unicode`` table, as llama.cpp and the GGUF vocabularies use it.

Bytes ``!``..``~``, 0xA1..0xAC and 0xAE..0xFF map to the code point of the same number; the
other 68 bytes, ascending, map to U+0100 + n. Normal tokens and merges are stored in the
GGUF in this mapped form.
"""

from __future__ import annotations

from ..errors import TokenizerError


def _build() -> list[str]:
    keep = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    table: list[str] = [""] * 256
    for b in keep:
        table[b] = chr(b)
    n = 0
    for b in range(256):
        if not table[b]:
            table[b] = chr(256 + n)
            n += 1
    return table


BYTE_TO_CHAR: list[str] = _build()
CHAR_TO_BYTE: dict[str, int] = {c: b for b, c in enumerate(BYTE_TO_CHAR)}
#: raw bytes → mapped text, for bytes.translate-style use through str.join
BYTE_TO_MAPPED = [c.encode("utf-8") for c in BYTE_TO_CHAR]


# str.translate table: mapped chars -> chr(byte); other chars up to U+0143 -> U+0100 (a
# sentinel that latin-1 cannot encode), so invalid text fails instead of passing through
_TRANSLATE = {cp: 0x100 for cp in range(0x144)}
_TRANSLATE.update({ord(c): b for b, c in enumerate(BYTE_TO_CHAR)})


def decode_mapped(text: bytes, token_id: int) -> bytes:
    """ByteLevel-decode a stored token (UTF-8 of mapped chars) to its raw bytes."""
    try:
        return text.decode("utf-8").translate(_TRANSLATE).encode("latin-1")
    except (UnicodeDecodeError, UnicodeEncodeError):
        raise TokenizerError(f"token {token_id} ({text[:40]!r}) is typed NORMAL but is not ByteLevel-encoded") from None
