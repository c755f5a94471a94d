"""payload.pack: one pass puts every piece in place and computes every digest asked for, the
same bytes and digests whichever way the bytes got there (written, shared, kernel-copied)."""

from __future__ import annotations

import hashlib
import os
import threading

import pytest

from q25deploy.errors import OutputError
from q25deploy.packer import payload
from q25deploy.packer.payload import Piece, pack

BLK = 4096


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


@pytest.fixture
def src(tmp_path):
    data = os.urandom(3 * payload.CHUNK + 12345)  # several chunks of the pass, a ragged end
    p = tmp_path / "model.bin"
    p.write_bytes(data)
    return p, data


def pieces_for(size: int) -> tuple[list[Piece], list[int]]:
    """Partition 0: three tensors with gaps, in source order; partition 1: two tensors placed
    in reverse source order (hashed from the file); one overlapping another in the source; one
    tensor placed nowhere; partition 2: one whole tensor at offset 0 (its digest is the tensor's)."""
    ps = [
        Piece("a", 100, 5000, 0, 0),
        Piece("b", 6000, payload.CHUNK + 7, 0, 5024),
        Piece("c", 2 * payload.CHUNK, 333, 0, 5024 + payload.CHUNK + 64),
        Piece("d", 2 * payload.CHUNK + 1000, 4000, 1, 5000),
        Piece("e", 2 * payload.CHUNK + 500, 4000, 1, 0),  # overlaps d in the source, before it in the file
        Piece("f", 50, 10, -1, 0),
        Piece("g", size - 9000, 9000, 2, 0),
    ]
    sizes = [5024 + payload.CHUNK + 64 + 333 + 50, 9000, 9000]
    return ps, sizes


def expected(data: bytes, ps: list[Piece], sizes: list[int]) -> list[bytes]:
    outs = [bytearray(n) for n in sizes]
    for p in ps:
        if p.dst >= 0:
            outs[p.dst][p.dst_offset : p.dst_offset + p.nbytes] = data[p.src_offset : p.src_offset + p.nbytes]
    return [bytes(o) for o in outs]


@pytest.mark.parametrize("hashing", [True, False])
def test_pack_places_every_piece_and_hashes_each_stream(tmp_path, src, hashing):
    path, data = src
    ps, sizes = pieces_for(len(data))
    dsts = [str(tmp_path / f"out{i}.bin") for i in range(len(sizes))]
    r = pack(str(path), ps, dsts, sizes, hash_pieces=hashing, hash_outputs=hashing, file_digest=hashing)
    want = expected(data, ps, sizes)
    assert [open(d, "rb").read() for d in dsts] == want
    assert r.copied == sum(p.nbytes for p in ps if p.dst >= 0)
    if hashing:
        assert r.file == sha(data) and r.read == len(data)  # the whole file, once
        assert r.pieces == {p.key: sha(data[p.src_offset : p.src_offset + p.nbytes]) for p in ps}
        assert r.outputs == [sha(w) for w in want]
    else:
        assert (r.file, r.pieces, r.outputs, r.read) == (None, {}, [], 0)


def test_pack_reads_only_the_tensor_ranges_without_a_file_digest(tmp_path, src):
    path, data = src
    ps, sizes = pieces_for(len(data))
    dsts = [str(tmp_path / f"out{i}.bin") for i in range(len(sizes))]
    r = pack(str(path), ps, dsts, sizes, hash_pieces=False)
    spans = set()
    for p in ps:
        spans.update(range(p.src_offset, p.src_offset + p.nbytes))
    assert r.read == len(spans) and r.pieces == {}
    assert r.outputs == [sha(w) for w in expected(data, ps, sizes)]


def test_pack_shares_whole_blocks_where_the_filesystem_can(tmp_path, monkeypatch):
    """A tensor at the same offset modulo the block size in both files: its whole blocks are
    cloned (here recorded, as on XFS/Btrfs), only its ragged ends are written, and the digests
    still come from the source bytes."""
    data = os.urandom(8 * BLK)
    (tmp_path / "m").write_bytes(data)
    clones = []
    monkeypatch.setattr(payload, "_clone", lambda s, d, so, n, do: clones.append((so, n, do)))
    monkeypatch.setattr(os, "fstatvfs", lambda fd: type("V", (), {"f_frsize": BLK})())
    ps = [Piece("t", BLK + 100, 5 * BLK, 0, 100), Piece("u", 7 * BLK + 1, 10, 0, 5 * BLK + 200)]
    size = 5 * BLK + 210
    r = pack(str(tmp_path / "m"), ps, [str(tmp_path / "o")], [size])
    assert clones == [(2 * BLK, 4 * BLK, BLK)]  # t's whole blocks; u shares none (other offset)
    assert r.shared == 4 * BLK and r.copied == 5 * BLK + 10 - 4 * BLK
    out = (tmp_path / "o").read_bytes()
    assert out[100:BLK] == data[BLK + 100 : 2 * BLK] and out[BLK : 5 * BLK] == bytes(4 * BLK)  # left to the clone
    full = expected(data, ps, [size])[0]
    assert r.outputs == [sha(full)] and r.pieces["t"] == sha(data[BLK + 100 : 6 * BLK + 100])


def test_pack_copies_when_the_filesystem_cannot_share(tmp_path, monkeypatch):
    def refuse(*a):
        raise OSError(95, "Operation not supported")

    monkeypatch.setattr(payload, "_clone", refuse)
    data = os.urandom(4 * BLK)
    (tmp_path / "m").write_bytes(data)
    r = pack(str(tmp_path / "m"), [Piece("t", 0, 4 * BLK, 0, 0)], [str(tmp_path / "o")], [4 * BLK])
    assert (r.shared, r.copied) == (0, 4 * BLK) and (tmp_path / "o").read_bytes() == data


def test_pack_refuses_a_source_shorter_than_its_pieces(tmp_path):
    (tmp_path / "m").write_bytes(b"x" * 100)
    with pytest.raises(OutputError, match="changed while it was read"):
        pack(str(tmp_path / "m"), [Piece("t", 50, 100, 0, 0)], [str(tmp_path / "o")], [100])


def test_a_copy_without_digests_refuses_a_source_shorter_than_its_pieces(tmp_path):
    (tmp_path / "m").write_bytes(b"x" * 100)
    with pytest.raises(OutputError, match="model file ended early"):
        pack(
            str(tmp_path / "m"),
            [Piece("t", 50, 100, 0, 0)],
            [str(tmp_path / "o")],
            [100],
            hash_pieces=False,
            hash_outputs=False,
        )


def test_a_copy_stops_between_chunks_when_told(tmp_path, src):
    """A copy the build no longer wants (it failed, or Ctrl-C) stops at once."""
    path, data = src
    ps, sizes = pieces_for(len(data))
    dsts = [str(tmp_path / f"out{i}.bin") for i in range(len(sizes))]
    stop = threading.Event()
    stop.set()
    with pytest.raises(payload.Stopped):
        pack(str(path), ps, dsts, sizes, hash_pieces=False, hash_outputs=False, stop=stop)
    assert all(not any(open(d, "rb").read()) for d in dsts)  # created at their sizes, nothing copied
