"""q25_dequantize (C runtime) against gguf-py's numpy dequantization, float32 bit for bit: every
block of every tensor of the test models (of the full-size models, the first and the last of
each type and shape) and random blocks of each type (hypothesis), on this machine (under ASan+UBSan) and on
aarch64 under qemu-aarch64 (-cpu cortex-a53).

A NaN is the one value compared by class, not bits, for the quantised types: which NaN an
operation returns when both operands are NaN, or for inf * 0, is the CPU's choice (x86 gives
0xffc00000, ARMv8 0x7fc00000), so numpy on x86 and ggml on the A53 differ there too. F32, F16
and BF16 only move bits: their NaNs are compared bit for bit."""

from __future__ import annotations

import platform
import subprocess
from pathlib import Path

import numpy as np
import pytest
from fuzzing import fuzz
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as Q
from gguf.quants import dequantize
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from requirements import need_program
from test_c_runtime import QEMU_LIBS, arm_q25tok, san_q25tok  # noqa: F401 (session fixtures)

from q25deploy.model.gguf import GGUFFile
from q25deploy.model.synthetic import write_model
from q25deploy.packer.runtime import SANITIZE_FLAGS
from q25deploy.resources import runtime_library_sources, runtime_sources

TYPES = ["F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"]
BIT_MOVES = {"F32", "F16", "BF16"}
HERE = Path(__file__).resolve().parent
VOCAB = HERE.parent / "data" / "ggml-vocab-qwen2.gguf"


def reference_bits(data: bytes, type_name: str) -> np.ndarray:
    with np.errstate(all="ignore"):
        out = dequantize(np.frombuffer(data, dtype=np.uint8), Q[type_name])
    return np.ascontiguousarray(out, dtype=np.float32).reshape(-1).view(np.uint32)


def assert_same_floats(got: np.ndarray, ref: np.ndarray, type_name: str, what: str) -> None:
    assert got.size == ref.size, f"{what}: {got.size} values, numpy gives {ref.size}"
    nan_ref = (ref & 0x7FFFFFFF) > 0x7F800000
    nan_got = (got & 0x7FFFFFFF) > 0x7F800000
    differ = (got != ref) & ~(nan_ref & nan_got & (type_name not in BIT_MOVES))
    if differ.any():
        i = int(np.argmax(differ))
        block = GGML_QUANT_SIZES[Q[type_name]][0]
        pytest.fail(
            f"{what}: {int(differ.sum())} values differ; first at element {i} (block {i // block}): "
            f"C {got[i]:#010x}, numpy {ref[i]:#010x}"
        )


def c_dequant(exe: list, type_name: str, data: bytes, tmp: Path) -> np.ndarray:
    src = tmp / f"{type_name}.blocks"
    src.write_bytes(data)
    r = subprocess.run([*map(str, exe), "dequant", type_name, str(src)], capture_output=True, timeout=900, check=False)
    assert r.returncode == 0, r.stderr.decode()
    return np.frombuffer(r.stdout, dtype=np.uint32)


def check_model(exe: list, model: Path, tmp: Path, batch: int = 8 << 20, ends_only: bool = False) -> set[str]:
    """Every block of every tensor of ``model``: the tensors of a type concatenated (large ones
    cut at block boundaries) into runs of at most ``batch`` bytes, one q25tok run each. Small
    runs keep this process's peak RSS low: a child inherits it (ru_maxrss survives fork and
    exec), and libFuzzer's -rss_limit_mb in a later test would count it. ``ends_only``: of the
    tensors of one type and shape, the first and the last in the file (the others repeat them)."""
    with GGUFFile(model) as f:
        tensors = sorted(f.tensors, key=lambda t: (t.type_name, t.data_offset))
    if ends_only:
        kinds: dict[tuple, list] = {}
        for t in tensors:  # sorted by type and offset already
            kinds.setdefault((t.type_name, tuple(t.shape)), []).append(t)
        ends = {id(k[i]) for k in kinds.values() for i in (0, -1)}
        tensors = [t for t in tensors if id(t) in ends]
    runs: list[tuple[str, list[tuple[str, int, int]]]] = []  # (type, [(tensor, offset, bytes)])
    for t in tensors:
        step = batch // GGML_QUANT_SIZES[Q[t.type_name]][1] * GGML_QUANT_SIZES[Q[t.type_name]][1]
        for start in range(t.data_offset, t.data_offset + t.nbytes, step):
            piece = (t.name, start, min(step, t.data_offset + t.nbytes - start))
            if runs and runs[-1][0] == t.type_name and sum(p[2] for p in runs[-1][1]) + piece[2] <= batch:
                runs[-1][1].append(piece)
            else:
                runs.append((t.type_name, [piece]))
    with open(model, "rb") as raw:
        for type_name, pieces in runs:
            data = b""
            for _, start, size in pieces:
                raw.seek(start)
                data += raw.read(size)
            got, ref = c_dequant(exe, type_name, data, tmp), reference_bits(data, type_name)
            names = sorted({p[0] for p in pieces})
            assert_same_floats(got, ref, type_name, f"{model.name} {type_name} ({', '.join(names[:3])}...)")
    return {r[0] for r in runs}


def qemu(arm: Path) -> list:
    return ["qemu-aarch64", "-cpu", "cortex-a53", "-L", QEMU_LIBS, arm]


@pytest.fixture(scope="module")
def models(tmp_path_factory, qwen25_tiny) -> list[Path]:
    """tiny (Q5_0, Q8_0, F32) and tiny-untied (256-wide rows: Q4_K, Q6_K)."""
    untied = tmp_path_factory.mktemp("models") / "qwen25-tiny-untied.gguf"
    write_model(untied, "tiny-untied", str(VOCAB))
    return [qwen25_tiny, untied]


def test_every_tensor_of_the_test_models(san_q25tok, models, tmp_path):  # noqa: F811
    seen = set()
    for m in models:
        seen |= check_model([san_q25tok], m, tmp_path)
    assert seen == {"F32", "Q5_0", "Q8_0", "Q4_K", "Q6_K"}


def test_every_tensor_of_the_test_models_on_aarch64(arm_q25tok, models, tmp_path):  # noqa: F811
    for m in models:
        check_model(qemu(arm_q25tok), m, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["0.5b", "1.5b"])
def test_every_tensor_of_the_full_size_models(tmp_path, q25tok, preset):
    model = tmp_path / f"qwen25-{preset}.gguf"
    write_model(model, preset, str(VOCAB))
    # rows that are not whole 256-blocks (0.5B's 896) fall back to Q5_0 / Q8_0
    expected = {"F32", "Q4_K", "Q6_K"} | ({"Q5_0", "Q8_0"} if preset == "0.5b" else set())
    assert check_model([q25tok], model, tmp_path, ends_only=True) == expected


def blocks(type_name: str, bulk: int) -> st.SearchStrategy[bytes]:
    """Blocks of the type: up to 4 KiB drawn by hypothesis (shrinkable: zero scales, halves
    that are NaN, inf or subnormal...), then up to ``bulk`` blocks of seeded random bytes."""
    size = GGML_QUANT_SIZES[Q[type_name]][1]
    drawn = st.integers(1, max(1, 4096 // size)).flatmap(lambda n: st.binary(min_size=n * size, max_size=n * size))
    return st.builds(
        lambda d, seed, n: d + np.random.default_rng(seed).bytes(n * size),
        drawn,
        st.integers(0, 2**32 - 1),
        st.integers(0, bulk),
    )


# (examples, bulk blocks) per machine: qemu-user starts slower
MACHINES = {"host": (60, 64), "aarch64": (12, 1024)}


@pytest.mark.parametrize("machine", sorted(MACHINES))
@pytest.mark.parametrize("type_name", TYPES)
def test_random_blocks(request, tmp_path_factory, type_name, machine):
    exe = [request.getfixturevalue("san_q25tok")] if machine == "host" else qemu(request.getfixturevalue("arm_q25tok"))
    tmp = tmp_path_factory.mktemp("blocks")
    examples, bulk = MACHINES[machine]

    @settings(max_examples=examples, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(data=blocks(type_name, bulk))
    def case(data):
        assert_same_floats(
            c_dequant(exe, type_name, data, tmp),
            reference_bits(data, type_name),
            type_name,
            f"random {type_name} blocks {data.hex()[:64]}...",
        )

    case()


def test_other_types_are_refused_not_guessed(san_q25tok, tmp_path):  # noqa: F811
    src = tmp_path / "blocks"
    src.write_bytes(bytes(range(256)) * 8)
    for t in ("Q8_1", "Q8_K", "IQ4_NL", "IQ2_XXS", "TQ1_0", "MXFP4", "I8", "F64"):
        r = subprocess.run([san_q25tok, "dequant", str(Q[t].value), src], capture_output=True, check=False)
        assert r.returncode == 7 and r.stdout == b"" and b"not supported" in r.stderr, t
    r = subprocess.run([san_q25tok, "dequant", "IQ4_NL", src], capture_output=True, check=False)
    assert r.returncode == 2 and r.stdout == b""
    src.write_bytes(bytes(144 * 3 + 1))  # a Q4_K block and a byte
    r = subprocess.run([san_q25tok, "dequant", "Q4_K", src], capture_output=True, check=False)
    assert r.returncode == 3 and b"not a whole number of 144-byte blocks" in r.stderr


def test_the_build_tensor_table_finds_every_tensor(builds, san_q25tok):  # noqa: F811
    """partitions/tensors.tab: q25_tensor_find gives each tensor's place as the partition map
    says, and the bytes there dequantize as the GGUF's do."""
    from q25deploy.builddir import BuildDir
    from q25deploy.deploy.state.release import release_from_build

    b = BuildDir(builds["kv260"])
    pmap, table = b.partition_map, b.tensor_table
    assert b.manifest["partitions/tensors.tab"].kind == "tensor-table"
    assert "partitions/tensors.tab" in {f.rel for f in release_from_build(b.path).files}  # the board gets it
    assert [(t["name"], t["region"], t["offset"], t["bytes"]) for t in table] == [
        (t["name"], t["region"], t["offset"], t["bytes"]) for t in pmap["tensors"]
    ]
    for t in pmap["tensors"][:6] + pmap["tensors"][-3:]:
        r = subprocess.run(
            [san_q25tok, "tensor", b.path / "partitions/tensors.tab", t["name"]],
            capture_output=True,
            text=True,
            check=True,
        )
        shape = ",".join(map(str, t["shape"]))
        assert r.stdout == (
            f"{t['name']} type {Q[t['type']].value} {t['type']} region {t['region']} "
            f"offset {t['offset']:#x} bytes {t['bytes']} elements {int(np.prod(t['shape']))} "
            f"shape {shape} dequantize yes\n"
        )
    r = subprocess.run(
        [san_q25tok, "tensor", b.path / "partitions/tensors.tab", "blk.99.attn_q.weight"],
        capture_output=True,
        check=False,
    )
    assert r.returncode == 8 and b"no such tensor" in r.stderr


@pytest.mark.parametrize(
    "line",
    [
        "blk.0.x 12 Q4_K 0 0x0 144 256,1 extra",  # a field too many
        "blk.0.x 12 Q6_K 0 0x0 144 256",  # number and name disagree
        "blk.0.x 12 Q4_K 0 0x0 145 256",  # bytes are not the shape's
        "blk.0.x 12 Q4_K 0 0x0 144 255",  # the row is not whole blocks
        "blk.0.x 12 Q4_K 0 0 144 256",  # offset without 0x
        "blk.0.x 12 Q4_K -1 0x0 144 256",
        "blk 0.x 12 Q4_K 0 0x0 144 256",
        "blk.0.x 12 Q4_K 0 0xffffffffffffffff 144 256",  # offset + bytes wraps
        "blk.0.x 12 Q4_K 0 0x0 144 256,0",
        "blk.0.x 12 Q4_K 0 0x0 144 1,1,1,1,256",
    ],
)
def test_a_malformed_tensor_line_is_refused(san_q25tok, tmp_path, line):  # noqa: F811
    from q25deploy.errors import SchemaError
    from q25deploy.schema import parse_tensor_table

    table = tmp_path / "tensors.tab"
    good = "ok.weight 0 F32 0 0x0 4 1 # a comment\n"
    table.write_text(good + line + "\n")
    r = subprocess.run([san_q25tok, "tensor", table, "blk.0.x"], capture_output=True, check=False)
    assert r.returncode == 3 and b"malformed" in r.stderr
    assert subprocess.run([san_q25tok, "tensor", table, "ok.weight"], capture_output=True, check=False).returncode == 0
    with pytest.raises(SchemaError, match="line 2"):
        parse_tensor_table(good + line + "\n", "tensors.tab")
    assert parse_tensor_table(good, "t")[0] == {
        "name": "ok.weight",
        "type": 0,
        "type_name": "F32",
        "region": 0,
        "offset": 0,
        "bytes": 4,
        "shape": [1],
    }


@pytest.mark.parametrize("arch", ["host", "armhf", "aarch64"])
def test_weights_api_contract(tmp_path, arch):
    """tests/runtime/weights_api_test.c under ASan+UBSan, with a 32-bit size_t (armhf under
    qemu-arm, as an armv7 board would run it), and on aarch64 under qemu-aarch64 as a Cortex-A53
    (armv8.0-a), where q25_row_dot is the NEON kernels the forward pass uses."""
    if arch == "host":
        cc, flags, run_with = need_program("cc", "Debian: gcc"), SANITIZE_FLAGS.split(), []
    elif arch == "aarch64":
        cc = need_program("aarch64-linux-gnu-gcc", "Debian: gcc-aarch64-linux-gnu")
        flags = ["-O2"]
        run_with = [
            need_program("qemu-aarch64", "Debian: qemu-user"),
            "-cpu",
            "cortex-a53",
            "-L",
            "/usr/aarch64-linux-gnu",
        ]
    else:
        cc = need_program("arm-linux-gnueabihf-gcc", "Debian: gcc-arm-linux-gnueabihf libc6-dev-armhf-cross")
        flags, run_with = ["-O2"], [need_program("qemu-arm", "Debian: qemu-user"), "-L", "/usr/arm-linux-gnueabihf"]
    exe = tmp_path / "weights_api_test"
    subprocess.run(
        [
            cc,
            "-std=c11",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-ffp-contract=off",
            *flags,
            "-I",
            str(runtime_sources()),
            str(HERE / "weights_api_test.c"),
            *map(str, runtime_library_sources()),
            "-o",
            str(exe),
            "-lm",
        ],
        check=True,
    )
    r = subprocess.run([*run_with, exe], capture_output=True, text=True, check=False)
    assert r.returncode == 0 and r.stdout.endswith(" passed, 0 failed\n"), r.stdout + r.stderr
    assert f"row dot: {'neon' if arch == 'aarch64' else 'generic'}\n" in r.stdout
    qrow = {"aarch64": "neon", "armhf": "generic"}.get(arch, "sse2" if platform.machine() == "x86_64" else "generic")
    assert f"qrow dot: {qrow}\n" in r.stdout


def test_weights_fuzz_harness_finds_nothing(tmp_path, campaign):
    """fuzz/weights_fuzz.c: mutated tensor tables and blocks of every type under ASan+UBSan."""
    fuzz(tmp_path, HERE / "fuzz" / "weights_fuzz.c", HERE / "fuzz" / "weights_corpus")
