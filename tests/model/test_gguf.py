from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFReader
from gguf_craft import gguf, kv_u32, s, small_valid, tensor_info

from q25deploy.errors import GGUFError
from q25deploy.model.gguf import GGUFFile


def _write(tmp_path, data: bytes, name="m.gguf"):
    p = tmp_path / name
    p.write_bytes(data)
    return p


def cut_vocab(src: Path, dst: Path, head: int = 2000, tail: int = 50) -> Path:
    """The vocab fixture's every key, in its order and types, its arrays cut to their first
    ``head`` and last ``tail`` entries (the added tokens): gguf-py's reader is slow over the
    whole vocabulary, and the layout it checks is the same at any length."""
    from gguf import GGUFValueType, GGUFWriter

    with GGUFFile(src) as f:
        w = GGUFWriter(dst, f.metadata["general.architecture"])
        for key, value in f.metadata.items():
            vtype = f.value_types[key]
            if key == "general.architecture":
                continue
            if isinstance(vtype, tuple):
                items = value.to_list() if hasattr(value, "to_list") else list(value)
                cut = items[:head] + items[-tail:]
                w.add_key_value(key, cut, GGUFValueType.ARRAY, sub_type=GGUFValueType(vtype[1]))
            else:
                w.add_key_value(key, value, GGUFValueType(vtype))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    return dst


def test_metadata_matches_gguf_reader_on_the_vocab_fixture(vocab_gguf, tmp_path):
    cut = cut_vocab(vocab_gguf, tmp_path / "vocab-cut.gguf")
    with GGUFFile(vocab_gguf) as whole, GGUFFile(cut) as part:  # the same keys, order and types
        assert list(whole.value_types.items()) == list(part.value_types.items())
        assert len(part.metadata["tokenizer.ggml.tokens"]) == 2050 < len(whole.metadata["tokenizer.ggml.tokens"])
    vocab_gguf = cut
    ref = GGUFReader(vocab_gguf)
    with GGUFFile(vocab_gguf) as f:
        assert list(f.metadata) == list(ref.fields)[3:]  # GGUFReader adds GGUF.version/tensor_count/kv_count
        for key, field in list(ref.fields.items())[3:]:
            mine = f.metadata[key]
            if key == "tokenizer.ggml.tokens" or key == "tokenizer.ggml.merges":
                theirs = [bytes(field.parts[i]) for i in field.data]
                assert mine.to_list() == theirs
                assert [mine[i] for i in (0, 1000, len(theirs) - 1)] == [theirs[i] for i in (0, 1000, len(theirs) - 1)]
            elif key == "tokenizer.ggml.token_type":
                assert np.array_equal(mine, np.concatenate([field.parts[i] for i in field.data]))
            elif isinstance(mine, str):
                assert mine == bytes(field.parts[-1]).decode()
            else:
                assert mine == pytest.approx(field.parts[-1][0])


def test_tensor_directory_matches_gguf_reader(tmp_path):
    from gguf import GGML_QUANT_SIZES, GGUFWriter
    from gguf import GGMLQuantizationType as Q

    path = tmp_path / "quants.gguf"
    w = GGUFWriter(path, "qwen2")
    w.add_custom_alignment(64)
    rng = np.random.default_rng(1)
    for i, q in enumerate([Q.Q4_K, Q.Q6_K, Q.Q8_0, Q.Q5_0, Q.F16, Q.F32, Q.Q4_0]):
        block, size = GGML_QUANT_SIZES[q]
        rows, cols = 3 + i, 256 * (1 + i % 2)
        w.add_tensor(
            f"blk.{i}.w", np.frombuffer(rng.bytes(rows * cols // block * size), np.uint8).reshape(rows, -1), raw_dtype=q
        )
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    ref = GGUFReader(path)
    with GGUFFile(path) as f:
        assert f.alignment == 64
        assert len(f.tensors) == len(ref.tensors) > 0
        for a, b in zip(ref.tensors, f.tensors):
            assert (a.name, int(a.tensor_type), int(a.data_offset), int(a.n_bytes)) == (
                b.name,
                b.ggml_type,
                b.data_offset,
                b.nbytes,
            )
            assert tuple(int(x) for x in a.shape) == b.shape
            assert f.read(b, 0, b.nbytes) == a.data.tobytes()
            assert f.read(b, 7, 70) == a.data.tobytes()[7:70]


def test_tensor_reads_stay_inside_the_tensor_and_a_file_cut_short_is_a_clear_error(tmp_path):
    path = _write(tmp_path, small_valid())
    with GGUFFile(path) as f:
        b = f.tensor("b")
        with pytest.raises(ValueError, match="outside"):
            f.read(b, 0, b.nbytes + 1)
        with open(path, "r+b") as cut:  # changed under the open file: a short read
            cut.truncate(b.data_offset + 5)
        with pytest.raises(GGUFError, match="ended while reading b") as e:
            f.read(b, 0, b.nbytes)
        assert "\n" not in str(e.value)


def test_small_valid_file_parses(tmp_path):
    with GGUFFile(_write(tmp_path, small_valid())) as f:
        assert f.metadata["general.architecture"] == "qwen2"
        assert f.metadata["tokenizer.ggml.tokens"].to_list() == [b"a", b"bc", b""]
        assert [t.name for t in f.tensors] == ["a", "b"]
        assert f.tensor("b").shape == (4, 2) and f.tensor("b").nbytes == 32


def test_truncated_anywhere_is_a_clear_error(tmp_path):
    data = small_valid()
    for cut in range(len(data)):
        p = _write(tmp_path, data[:cut])
        with pytest.raises(GGUFError):
            GGUFFile(p)


@pytest.mark.parametrize(
    "data, message",
    [
        (b"GGML" + bytes(40), "bad magic"),
        (gguf([], [], version=1), "unsupported GGUF version 1"),
        (b"GGUF" + (3 << 16).to_bytes(4, "little") + bytes(16), "big-endian"),
        (gguf([], [], n_kv=1 << 60), "claims 1152921504606846976 metadata keys"),
        (gguf([], [], n_tensors=1 << 40), "claims 1099511627776 tensors"),
        (gguf([s("k") + (8).to_bytes(4, "little") + (1 << 40).to_bytes(8, "little")], []), "runs past the end"),
        (
            gguf(
                [s("k") + (9).to_bytes(4, "little") + (8).to_bytes(4, "little") + (1 << 60).to_bytes(8, "little")], []
            ),
            "array of 1152921504606846976 strings",
        ),
        (gguf([kv_u32("a", 1), kv_u32("a", 2)], []), "duplicate metadata key 'a'"),
        (gguf([s("k") + (99).to_bytes(4, "little")], []), "unknown value type 99"),
        (
            gguf([], [tensor_info("t", (8,), 0, 0), tensor_info("t", (8,), 0, 32)], bytes(64)),
            "duplicate tensor name 't'",
        ),
        (gguf([], [tensor_info("t", (8,), 77, 0)], bytes(64)), "unknown ggml type id 77"),
        (gguf([], [tensor_info("t", (8,), 0, 0)], bytes(16)), "is truncated: it ends at byte 80 but its tensor data"),
        (gguf([], [tensor_info("t", (8,), 0, 1 << 50)], bytes(64)), "lies outside the file"),
        (gguf([], [tensor_info("t", (8,), 0, 8)], bytes(64)), "not aligned"),
        (gguf([], [tensor_info("a", (16,), 0, 0), tensor_info("b", (8,), 0, 32)], bytes(96)), "overlap"),
        (gguf([], [tensor_info("t", (1 << 61, 1 << 61), 0, 0)], bytes(64)), "cannot fit"),
        (gguf([], [tensor_info("t", (0,), 0, 0)], bytes(64)), "bad dimension"),
        (gguf([], [tensor_info("t", (30,), 8, 0)], bytes(64)), "not a multiple"),
        (gguf([kv_u32("general.alignment", 24)], []), "power-of-two"),
        (gguf([s(b"k\xff") + (4).to_bytes(4, "little") + bytes(4)], []), "not valid UTF-8"),
    ],
)
def test_hostile_files_fail_with_one_clear_error(tmp_path, data, message):
    p = _write(tmp_path, data)
    with pytest.raises(GGUFError) as e:
        GGUFFile(p)
    assert "\n" not in str(e.value)
    assert message in str(e.value)


def test_not_a_file(tmp_path):
    with pytest.raises(GGUFError, match="no such file"):
        GGUFFile(tmp_path / "missing.gguf")
    with pytest.raises(GGUFError, match="is not a regular file"):
        GGUFFile(tmp_path)


TRUNCATED = re.compile(
    r"^(?P<path>\S+) is truncated: it ends at byte (?P<size>\d+) but its (?P<part>header|tensor data)\b.*? needs "
    r"(?:at least )?(?P<need>\d+) bytes \(an interrupted download or copy\? fetch it again: .+\)$"
)


def _truncated_line(path, cut: int, data: bytes) -> re.Match:
    path.write_bytes(data[:cut])
    with pytest.raises(GGUFError) as e:
        GGUFFile(path)
    m = TRUNCATED.match(str(e.value))
    assert m, str(e.value)
    assert m["path"] == str(path) and int(m["size"]) == cut < int(m["need"]) <= len(data)
    return m


def test_a_real_gguf_cut_anywhere_in_its_header_says_it_is_truncated(tmp_path, vocab_gguf):
    """The real Qwen2 vocabulary cut in its counts, its token strings, its token types and its merges
    (the issue's `'tokenizer.ggml.merges': string array runs past the end of the file`)."""
    data = Path(vocab_gguf).read_bytes()
    for cut in (12, 100, 1000, 1_500_000, 3_000_000, 5_000_000, len(data) - 3000, len(data) - 1):
        assert _truncated_line(tmp_path / "cut.gguf", cut, data)["part"] == "header"


def test_a_real_model_cut_in_its_tensor_infos_or_data_says_it_is_truncated(tmp_path, qwen25_tiny):
    data = Path(qwen25_tiny).read_bytes()
    with GGUFFile(qwen25_tiny) as f:
        first = min(t.data_offset for t in f.tensors)
        infos = f.data_start - 48 * len(f.tensors) // 2  # about half way through the tensor directory
    for cut in (infos, infos + 7):
        assert _truncated_line(tmp_path / "cut.gguf", cut, data)["part"] == "header"
    for cut in (first + 1, (first + len(data)) // 2, len(data) - 1):
        m = _truncated_line(tmp_path / "cut.gguf", cut, data)
        assert m["part"] == "tensor data" and int(m["need"]) == len(data)  # the size the file had


def test_a_truncated_model_is_one_line_and_the_bad_input_exit_code(tmp_path, qwen25_tiny, capsys):
    from q25deploy.cli import main

    cut = tmp_path / "cut.gguf"
    cut.write_bytes(Path(qwen25_tiny).read_bytes()[:-100])
    assert main(["inspect", str(cut)]) == 4  # GGUFError: docs/commands.md's bad-model exit code
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    assert f"{cut} is truncated: it ends at byte" in err and "re-download" in err


def test_an_ollama_model_found_truncated_names_ollama_pull():
    from q25deploy.model.source import ModelSource

    assert "`ollama pull qwen2.5:0.5b`" in ModelSource(Path("b"), "qwen2.5:0.5b", "ollama").refetch()
