"""The board-side C runtime (recipes/.../q25-tokenizer-runtime/files), built for real:
exact ids against the host codec under ASan+UBSan, the aarch64 build under qemu-aarch64,
the C API checks, exit codes, and a bounded libFuzzer run."""

from __future__ import annotations

import os
import random
import re
import subprocess
from pathlib import Path

import pytest
from corpus import CORPUS
from fuzzing import fuzz
from requirements import need_program
from shared_builds import runtime

from q25deploy.packer.runtime import SANITIZE_FLAGS
from q25deploy.resources import runtime_library_sources, runtime_sources

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
QEMU_LIBS = "/usr/aarch64-linux-gnu"
SAN_ENV = {**os.environ, "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=1", "UBSAN_OPTIONS": "halt_on_error=1"}


@pytest.fixture(scope="session")
def san_q25tok(tmp_path_factory) -> Path:
    need_program("cc", "Debian: gcc")
    return runtime(tmp_path_factory, sanitize=True) / "q25tok"


@pytest.fixture(scope="session")
def arm_q25tok(tmp_path_factory) -> Path:
    need_program("aarch64-linux-gnu-gcc", "Debian: gcc-aarch64-linux-gnu")
    need_program("qemu-aarch64", "Debian: qemu-user")
    return runtime(tmp_path_factory, cross="aarch64") / "q25tok"


@pytest.fixture(scope="session")
def images(tmp_path_factory, qwen2_image, qwen25_image) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("images")
    paths = {}
    for name, img in (("qwen2", qwen2_image), ("qwen25", qwen25_image)):
        paths[name] = d / f"{name}.q25tokrt"
        paths[name].write_bytes(img.data)
    return paths


def run(cmd, *, stdin: bytes = b"", env=SAN_ENV) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], input=stdin, capture_output=True, env=env, timeout=600, check=False)


def encode_files(exe: list, image: Path, texts: list[bytes], tmp: Path, special: bool) -> list[list[int]]:
    files = []
    for i, t in enumerate(texts):
        f = tmp / f"in{i:04d}.txt"
        f.write_bytes(t)
        files.append(f)
    r = run([*exe, "encode", *(["--special"] if special else []), image, *files])
    assert r.returncode == 0, r.stderr.decode()
    lines = r.stdout.decode().split("\n")
    assert lines[-1] == "" and len(lines) == len(texts) + 1
    return [[int(x) for x in line.split()] for line in lines[:-1]]


def random_inputs(seed: int, n: int) -> list[bytes]:
    """Mixed scripts, whitespace, special-token text and invalid UTF-8, reproducibly."""
    rng = random.Random(seed)
    alphabet = (
        "abc XYZ 0123 '\"!?.,;:-_/\\()[]{}<>|\t\n\r\u00a0\u3000\v\f"
        "éñüßçåøĳ"
        "абвгдЁж"
        "αβγ"
        "مرحبا"
        "नमस्ते"
        "สวัสดี"
        "你好世界日本語한국"
        "①½Ⅻ٣"
        "\u0301\u0308\u200d"
        "😀👩‍💻🇯🇵"
    )
    pieces = ["<|im_start|>", "<|im_end|>", "<tool_call>", "[PAD151650]", "<|fim_prefix|>", "</s>", "'re", "'LL"]
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(0, 40)):
            r = rng.random()
            if r < 0.1:
                parts.append(rng.choice(pieces).encode())
            elif r < 0.15:
                parts.append(bytes(rng.randrange(256) for _ in range(rng.randint(1, 4))))
            else:
                parts.append("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 8))).encode())
        out.append(b"".join(parts))
    return out


@pytest.mark.parametrize("name", ["qwen2", "qwen25"])
@pytest.mark.parametrize("special", [False, True])
def test_same_ids_as_the_host_codec(san_q25tok, images, request, tmp_path, name, special):
    codec = request.getfixturevalue(f"{name}_codec")
    texts = CORPUS + random_inputs(7 if special else 8, 150)
    got = encode_files([san_q25tok], images[name], texts, tmp_path, special)
    for text, ids in zip(texts, got):
        assert ids == codec.encode(text, parse_special=special), text


def test_stdin_and_decode_round_trip(san_q25tok, images):
    for text in CORPUS:
        r = run([san_q25tok, "encode", images["qwen25"]], stdin=text)
        assert r.returncode == 0
        ids = r.stdout.decode().split()
        if not ids:
            assert text == b""
            continue
        d = run([san_q25tok, "decode", images["qwen25"], *ids])
        assert d.returncode == 0 and d.stdout == text
    d = run([san_q25tok, "decode", images["qwen25"], "151644", "9707"])
    assert d.stdout == b"Hello"
    d = run([san_q25tok, "decode", "--special", images["qwen25"], "151644", "9707"])
    assert d.stdout == b"<|im_start|>Hello"


def test_aarch64_build_under_qemu_gives_the_host_ids(arm_q25tok, san_q25tok, images, tmp_path):
    qemu = ["qemu-aarch64", "-cpu", "cortex-a53", "-L", QEMU_LIBS, arm_q25tok]
    texts = CORPUS + random_inputs(9, 40)
    for special in (False, True):
        assert encode_files(qemu, images["qwen25"], texts, tmp_path, special) == encode_files(
            [san_q25tok], images["qwen25"], texts, tmp_path, special
        )
    r = run([*qemu, "info", images["qwen25"]], env=os.environ)
    assert r.returncode == 0 and b"crc         ok" in r.stdout
    header = arm_q25tok.read_bytes()[:20]
    assert header[:4] == b"\x7fELF" and int.from_bytes(header[18:20], "little") == 183  # EM_AARCH64


def test_info_reports_the_image(san_q25tok, images, qwen25_image):
    r = run([san_q25tok, "info", images["qwen25"]])
    out = r.stdout.decode()
    assert r.returncode == 0
    assert f"fingerprint {qwen25_image.fingerprint.hex()}" in out
    assert "151936 tokens, 151387 merges" in out and "crc         ok" in out
    assert out.count("\nsection ") == 8


def test_exit_codes(san_q25tok, images, tmp_path):
    assert run([san_q25tok]).returncode == 2
    assert run([san_q25tok, "frobnicate"]).returncode == 2
    assert run([san_q25tok, "decode", images["qwen25"], "12x"]).returncode == 2
    assert run([san_q25tok, "decode", images["qwen25"], "151936"]).returncode == 4
    assert run([san_q25tok, "info", tmp_path / "missing"]).returncode == 1
    assert run([san_q25tok, "encode", images["qwen25"], tmp_path / "missing"]).returncode == 1
    corrupt = tmp_path / "corrupt.q25tokrt"
    data = bytearray(images["qwen25"].read_bytes())
    data[5000] ^= 0xFF  # inside the token index: only the CRC pass sees it
    corrupt.write_bytes(bytes(data))
    r = run([san_q25tok, "info", corrupt])
    assert r.returncode == 3 and b"CRC32 mismatch" in r.stderr
    corrupt.write_bytes(bytes(data[:-1]))
    assert run([san_q25tok, "encode", corrupt], stdin=b"x").returncode == 3


def listed_codes(text: str) -> list[int]:
    """The exit codes a list names, in order: each number that a word follows (``6 region``)."""
    return [int(n) for n in re.findall(r"(?<![\w.-])(\d+) (?=[a-zA-Z])", text)]


def test_every_exit_code_is_listed_alike(san_q25tok):
    """q25tok_cli.c's header, the usage text q25tok prints and docs/runtime.md name the same exit
    codes, and they are the ones the sources return."""
    usage = run([san_q25tok, "--help"]).stdout.decode().split("exit codes:", 1)[1]
    source = (runtime_sources() / "q25tok_cli.c").read_text()
    header = source.split("*/", 1)[0].split("Exit codes", 1)[1].split(":", 1)[1].split("\n *\n", 1)[0]
    assert " ".join(header.replace("\n *", " ").split()) == " ".join(usage.split())
    doc = (ROOT / "docs" / "runtime.md").read_text().split("\nExit codes: ", 1)[1].split("\n\n", 1)[0]
    returned = {0} | {
        int(n)
        for c in runtime_sources().glob("*.[ch]")
        for n in re.findall(r"\b(?:Q25TOK_)?EXIT_[A-Z_]+ = (\d+)", c.read_text())
    }
    assert listed_codes(usage) == listed_codes(doc) == sorted(returned) == list(range(12))


def test_c_api_checks_under_sanitizers(tmp_path, images):
    cc = need_program("cc", "Debian: gcc")
    src = runtime_sources()
    exe = tmp_path / "api_test"
    subprocess.run(
        [
            cc,
            "-std=c11",
            "-Wall",
            "-Wextra",
            "-Werror",
            *SANITIZE_FLAGS.split(),
            "-I",
            str(src),
            str(HERE / "api_test.c"),
            *map(str, runtime_library_sources()),
            "-o",
            str(exe),
        ],
        check=True,
    )
    for image in (HERE / "fuzz" / "mini.q25tokrt", images["qwen25"]):
        r = run([exe, image])
        assert r.returncode == 0, r.stdout.decode() + r.stderr.decode()
        assert r.stdout.decode().endswith(" passed, 0 failed\n")


def test_c_api_checks_on_a_32_bit_build(tmp_path):
    """size_t of 32 bits, as on an armv7 board: the armhf build under qemu-arm. A piece whose
    BPE work area would overflow it is refused (before the bound, 40M invalid bytes made the
    encoder write far past scratch)."""
    cc = need_program("arm-linux-gnueabihf-gcc", "Debian: gcc-arm-linux-gnueabihf libc6-dev-armhf-cross")
    need_program("qemu-arm", "Debian: qemu-user")
    src = runtime_sources()
    exe = tmp_path / "api_test32"
    subprocess.run(
        [
            cc,
            "-std=c11",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-O2",
            "-I",
            str(src),
            str(HERE / "api_test.c"),
            *map(str, runtime_library_sources()),
            "-o",
            str(exe),
        ],
        check=True,
    )
    # the mini image only: the 40 MB case is slow under emulation, and the full image's
    # API checks run natively in test_c_api_checks_under_sanitizers
    r = run(["qemu-arm", "-L", "/usr/arm-linux-gnueabihf", exe, HERE / "fuzz" / "mini.q25tokrt"], env=os.environ)
    assert r.returncode == 0, r.stdout.decode() + r.stderr.decode()
    assert r.stdout.decode().endswith(" passed, 0 failed\n")


def test_fuzz_harness_finds_nothing(tmp_path, campaign):
    fuzz(
        tmp_path,
        HERE / "fuzz" / "q25tok_fuzz.c",
        HERE / "fuzz" / "corpus",
        "-rss_limit_mb=2048",
        env={"Q25_FUZZ_IMAGE": str(HERE / "fuzz" / "mini.q25tokrt")},
    )


def test_compare_fuzz_harness_finds_nothing(tmp_path, campaign):
    """fuzz/compare_fuzz.c: mutated forward files and generate dumps (q25tok compare) under ASan+UBSan."""
    fuzz(tmp_path, HERE / "fuzz" / "compare_fuzz.c", HERE / "fuzz" / "compare_corpus", "-rss_limit_mb=2048")


def test_ota_json_fuzz_harness_finds_nothing(tmp_path, campaign):
    """fuzz/ota_json_fuzz.c: mutated release.json and board states, what `q25tok ota` reads as
    root (ota_json.c), under ASan+UBSan; a parsed release.json renders back as it was."""
    fuzz(tmp_path, HERE / "fuzz" / "ota_json_fuzz.c", HERE / "fuzz" / "ota_json_corpus", extra=("ota_json.c",))


def test_compare_under_sanitizers(san_q25tok, tmp_path):
    """q25tok compare's statuses on the fuzz seeds (tests/ota/test_ota_forward_compare.py holds
    its verdicts to record_compare.py's)."""
    for seed, status, out in [
        ("agree", 0, ""),
        ("near_tie", 0, "near-tie at step 1: "),
        ("differs", 11, "step 0: layer 0: norm 1.6"),
    ]:
        data = (HERE / "fuzz" / "compare_corpus" / seed).read_bytes()
        expected, dump = data[1:].split(b"\0", 1)
        (tmp_path / "exp").write_bytes(expected)
        (tmp_path / "dump").write_bytes(dump)
        r = run([san_q25tok, "compare", tmp_path / "exp", str(data[0]), tmp_path / "dump"])
        assert (r.returncode, r.stderr) == (status, b"") and r.stdout.decode().startswith(out)
    (tmp_path / "dump").write_bytes(b"step 0 pos x token 1 margin 0\n")
    r = run([san_q25tok, "compare", tmp_path / "exp", "1", tmp_path / "dump"])
    assert r.returncode == 3 and b"a bad step line" in r.stderr
    assert run([san_q25tok, "compare", tmp_path / "exp", "1"]).returncode == 2
    (tmp_path / "old").write_bytes(expected.replace(b"q25-forward 3\n", b"q25-forward 1\n"))
    r = run([san_q25tok, "compare", tmp_path / "old", "0", tmp_path / "dump"])
    assert (r.returncode, r.stdout) == (3, b"")
    assert r.stderr.endswith(b": the forward file's first line is not 'q25-forward 3'\n")


def _forced_step(s: int, token: int, margin: str, top: str) -> str:
    return (
        f"step {s} pos {3 + s} token {token} margin {margin}\ntop {top}\nembd norm 1 values 1 0 0 0\n"
        "layer 0 norm 2 values 2 0 0 0\noutput norm 3 values 3 0 0 0\n"
    )


def test_compare_goes_on_past_a_near_tie(san_q25tok, tmp_path):
    """Format 2: the steps are teacher-forced positions, so a token taken the other way at a
    near tie does not end the comparison: that step's logits and every later step are still
    compared; a later difference is the verdict (exit 11), else the first near tie (exit 0)."""
    host = [
        (7, "0.25", "7 3.5 9 3.25"),
        (9, "0.0005", "9 1.5 7 1.4995"),
        (4, "0.0002", "4 2 5 1.9998"),
        (5, "1", "5 3 6 2"),
    ]
    expected = "q25-forward 3\ntolerances state_rtol 0.02 logit_atol 0.05 token_margin 0.1\n"
    expected += "prompt 0 steps 4 ids 1,2,3,7,9,4,5\n" + "".join(_forced_step(s, *h) for s, h in enumerate(host))
    (tmp_path / "exp").write_text(expected)

    def compare(board):
        (tmp_path / "dump").write_text("".join(_forced_step(s, *b) for s, b in enumerate(board)))
        r = run([san_q25tok, "compare", tmp_path / "exp", "0", tmp_path / "dump"])
        assert r.stderr == b""
        return r.returncode, r.stdout.decode()

    assert compare(host) == (0, "")
    ties = [host[0], (7, "0.0005", "9 1.5 7 1.4995"), (5, "0.0002", "4 2 5 1.9998"), host[3]]
    assert compare(ties) == (0, "near-tie at step 1: token 7, host 9 (margin 0.0005)\n")
    # the near tie's own logits are still compared
    assert compare([host[0], (7, "0.0005", "9 1.6 7 1.4995"), *host[2:]]) == (
        11,
        "step 1: logits: logit of 9 1.6, host 1.5\n",
    )
    # and so is every later step: a real difference after a near tie wins
    assert compare([*ties[:3], (6, "1", "5 3 6 2")]) == (11, "step 3: token: 6, host 5 (margin 1)\n")


def test_the_python_reader_and_q25tok_reject_the_same_images(san_q25tok, qwen2_image, tmp_path):
    """One list of checks in two languages: on seeded hostile images whose CRCs are all fixed
    (so mutations reach the structure and semantic checks), `q25tok info` accepts exactly the
    images the Python reader accepts, and no image makes either crash."""
    from hostile_images import mutations

    from q25deploy.errors import ImageError
    from q25deploy.tokenizer.image.reader import open_image

    disagree, rejected = [], 0
    for i, data in enumerate(
        mutations((HERE / "fuzz" / "mini.q25tokrt").read_bytes(), seed=11, n=150)
        + mutations(qwen2_image.data, seed=12, n=40)
    ):
        path = tmp_path / f"m{i:03d}.q25tokrt"
        path.write_bytes(data)
        try:
            open_image(data)
            py_ok = True
        except ImageError:
            py_ok = False
        r = run([san_q25tok, "info", path])
        assert r.returncode in (0, 3, 4), (i, r.returncode, r.stderr[-300:])  # no sanitizer report, no crash
        rejected += not py_ok
        if py_ok != (r.returncode == 0):
            disagree.append((i, py_ok, r.stderr.decode(errors="replace").strip()[-120:]))
    assert not disagree, disagree[:5]
    assert rejected > 50  # the mutations do reach the checks


def test_every_content_check_rejects_in_both_readers(san_q25tok, qwen25_image, tmp_path):
    """One hostile image (CRCs fixed) per way of failing checks 7 and 12-21: both readers
    refuse each, q25tok with the documented error and without a sanitizer report."""
    from hostile_images import targeted

    from q25deploy.errors import ImageError
    from q25deploy.tokenizer.image.reader import open_image

    open_image(qwen25_image.data)
    for image in ((HERE / "fuzz" / "mini.q25tokrt").read_bytes(), qwen25_image.data):
        for label, data in targeted(image):
            with pytest.raises(ImageError):
                open_image(data)
            path = tmp_path / "hostile.q25tokrt"
            path.write_bytes(data)
            r = run([san_q25tok, "info", path])
            want = {"7": b"bad section", "13": b"unsupported image format version"}.get(
                label.split()[0], b"corrupt image"
            )
            assert r.returncode == 3 and want in r.stderr, (label, r.returncode, r.stderr[-300:])
