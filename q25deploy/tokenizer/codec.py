"""The host codec: llama.cpp's Qwen2 tokenization, read from a Q25TOKRT image.

``Codec(image).encode(data, parse_special)`` gives the ids of
``llama_tokenize(text, add_special=false, parse_special)`` for the GGUF the image was built
from: special-token partitioning (CONTROL/UNKNOWN only with ``parse_special``, USER_DEFINED
always, longest first, plain substring search), the Qwen2 pre-tokenizer over the image's
Unicode class table, then byte-level BPE by merge rank (leftmost on ties), looked up through
the image's merge table.
"""

from __future__ import annotations

from heapq import heappop, heappush

from ..errors import CodecError
from ..model.token_types import BYTE, CONTROL, NORMAL, UNKNOWN, USER_DEFINED
from .image.reader import RuntimeImage
from .pretokenize import ClassTable, decode_lenient, encode_cpts, split_qwen2

_CACHE_LIMIT = 1 << 16
_LONG_PIECE = 256  # bytes; longer pieces merge through a heap (the rescan is quadratic)
_LOW = 0xFFFFFFFF  # a merge's result token, below its rank (see Codec)


class Codec:
    """Read from ``image`` without a bytes object per token or a tuple per merge, so reading
    Qwen2.5's 151k tokens and merges is quick: token bytes are sliced from the image when asked
    for, and each merge is one int in a dict, its rank in the high 32 bits and the
    merged token in the low 32 (so comparing two compares the ranks)."""

    def __init__(self, image: RuntimeImage) -> None:
        self.image = image
        idx = image.token_index
        self._bytes = bytes(image.token_bytes)
        self._offsets = idx["offset"].tolist()
        self._ends = (idx["offset"].astype("i8") + idx["length"]).tolist()
        self.types = idx["type"].tolist()
        m = image.merges.astype("u8")
        pairs, merged = (m[:, 0] << 32) | m[:, 1], (m[:, 3] << 32) | m[:, 2]
        self.ranks: dict[int, int] = dict(zip(pairs.tolist(), merged.tolist()))
        self.byte_to_token = image.byte_to_token.tolist()
        self.specials = [
            (int(i), int(t), self.raw_piece(int(i))) for i, t in zip(image.specials["id"], image.specials["type"])
        ]
        self.classes = ClassTable([tuple(r) for r in image.classes.tolist()])
        self._cache: dict[bytes, list[int]] = {}

    def raw_piece(self, tid: int) -> bytes:
        """Token ``tid``'s bytes as the image stores them (any type)."""
        return self._bytes[self._offsets[tid] : self._ends[tid]]

    # -- encoding -----------------------------------------------------------------------
    def partition(self, data: bytes, parse_special: bool) -> list[bytes | int]:
        """Split ``data`` into raw byte fragments and special token ids."""
        frags: list[bytes | int] = [data] if data else []
        for tid, ttype, text in self.specials:
            if not text:
                continue
            if ttype in (CONTROL, UNKNOWN) and not parse_special:
                continue
            if ttype not in (CONTROL, UNKNOWN, USER_DEFINED):
                continue
            out: list[bytes | int] = []
            for fr in frags:
                if isinstance(fr, int) or text not in fr:
                    out.append(fr)
                    continue
                start = 0
                while True:
                    hit = fr.find(text, start)
                    if hit < 0:
                        break
                    if hit > start:
                        out.append(fr[start:hit])
                    out.append(tid)
                    start = hit + len(text)
                if start < len(fr):
                    out.append(fr[start:])
            frags = out
        return frags

    def bpe(self, piece: bytes) -> list[int]:
        cached = self._cache.get(piece)
        if cached is not None:
            return cached
        b2t = self.byte_to_token
        ids = [b2t[b] for b in piece]
        ranks = self.ranks
        if len(ids) > _LONG_PIECE:
            return self._remember(piece, bpe_heap(ids, ranks))
        while len(ids) > 1:
            best = None
            best_i = -1
            prev = ids[0]
            for i in range(1, len(ids)):
                cur = ids[i]
                r = ranks.get(prev << 32 | cur)
                if r is not None and (best is None or r < best):
                    best, best_i = r, i - 1
                prev = cur
            if best is None:
                break
            ids[best_i : best_i + 2] = [best & _LOW]
        return self._remember(piece, ids)

    def _remember(self, piece: bytes, ids: list[int]) -> list[int]:
        if len(self._cache) < _CACHE_LIMIT:
            self._cache[piece] = ids
        return ids

    def encode_fragment(self, data: bytes) -> list[int]:
        cpts = decode_lenient(data)
        flags = self.classes.flags_of(cpts)
        out: list[int] = []
        for a, b in split_qwen2(cpts, flags):
            out.extend(self.bpe(encode_cpts(cpts[a:b])))
        return out

    def encode(self, data: bytes, parse_special: bool = False) -> list[int]:
        out: list[int] = []
        for fr in self.partition(data, parse_special):
            if isinstance(fr, int):
                out.append(fr)
            else:
                out.extend(self.encode_fragment(fr))
        return out

    # -- decoding -----------------------------------------------------------------------
    def piece(self, tid: int, special: bool = False) -> bytes:
        if not 0 <= tid < len(self.types):
            raise CodecError(f"token id {tid} is out of range (vocabulary has {len(self.types)} tokens)")
        t = self.types[tid]
        if t in (NORMAL, BYTE, USER_DEFINED) or (t in (CONTROL, UNKNOWN) and special):
            return self.raw_piece(tid)
        return b""

    def decode(self, ids, special: bool = False) -> bytes:
        return b"".join(self.piece(int(t), special) for t in ids)


def bpe_heap(ids: list[int], ranks: dict[int, int]) -> list[int]:
    """Byte-pair merges in O(n log n) for long pieces: the same order as the rescanning loop
    (lowest rank first, leftmost on a tie) from a heap of (rank, left index) over a linked
    list; entries made stale by an earlier merge are skipped when popped."""
    n = len(ids)
    val, nxt, alive = list(ids), list(range(1, n)) + [-1], [True] * n
    prv = list(range(-1, n - 1))
    heap: list[tuple[int, int, int, int, int, int]] = []

    def push(i: int) -> None:
        j = nxt[i]
        r = ranks.get(val[i] << 32 | val[j]) if j >= 0 else None
        if r is not None:
            heappush(heap, (r >> 32, i, j, val[i], val[j], r & _LOW))

    for i in range(n - 1):
        push(i)
    while heap:
        _rank, i, j, lv, rv, merged = heappop(heap)
        if not (alive[i] and alive[j] and nxt[i] == j and val[i] == lv and val[j] == rv):
            continue  # stale: one side was merged since
        val[i], alive[j] = merged, False
        nxt[i] = nxt[j]
        if nxt[j] >= 0:
            prv[nxt[j]] = i
        if prv[i] >= 0:
            push(prv[i])
        push(i)
    return [val[i] for i in range(n) if alive[i]]
