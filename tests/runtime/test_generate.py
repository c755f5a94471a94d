"""`q25tok generate` (model_forward.c, cli_generate.c): Qwen2.5's forward pass in C, from the
tiny model's build, against llama.cpp itself (llama-cpp-python, logits_all=True) on the smoke
prompts: greedy tokens equal wherever llama.cpp's top-two margin is clear, every step's logits
within a normalised mean squared error, on this machine under ASan+UBSan and on aarch64 under
qemu-aarch64 -cpu cortex-a53; --mem (a file standing in for /dev/mem, loaded by q25tok load)
gives what --files gives, and a byte flipped in one layer's weights is seen first at that
layer; --threads N gives the same bytes for any N (host, aarch64, and no race under
ThreadSanitizer); hostile hyperparameters and tables are refused with a one-line error."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest
from requirements import need_program
from test_c_runtime import QEMU_LIBS, SAN_ENV, arm_q25tok, san_q25tok  # noqa: F401 (session fixtures)
from test_probe import flip, loaded

from q25deploy.builddir import BuildDir
from q25deploy.model.gguf import GGUFFile
from q25deploy.resources import BUILD_PRODUCT_PATTERNS, runtime_sources

REGIONS, TENSORS = "partitions/regions.tab", "partitions/tensors.tab"
STEPS = 8
# llama.cpp's CPU backend multiplies quantised weights with activations quantised to 8 bits
# (Q8_K / Q8_0): its logits differ from a float32 pass by that rounding. test-backend-ops
# holds a matrix product to a normalised MSE of 5e-4 against the CPU; over the tiny model's
# two layers and output head we allow 1e-3 (measured on the smoke prompts: 6e-5 to 4.7e-4).
NMSE = 1e-3
# A top-two margin is clear when it exceeds the logits' disagreement several times over:
# eight times the RMS difference at that step (a logit error of that size is an 8-sigma event).
CLEAR = 8.0


def hparams_text(gguf: Path) -> str:
    """model_hparams.txt (docs/forward.md) from the GGUF's metadata, as the build writes it."""
    with GGUFFile(gguf) as f:
        md = f.metadata
        names = {t.name for t in f.tensors}
        n_vocab = len(md["tokenizer.ggml.tokens"].to_list())
    a = "qwen2."
    e, heads = md[a + "embedding_length"], md[a + "attention.head_count"]
    lines = [
        "# q25deploy model hyperparameters",
        "format=q25deploy-hparams/1",
        "arch=qwen2",
        f"n_vocab={n_vocab}",
        f"n_layer={md[a + 'block_count']}",
        f"n_embd={e}",
        f"n_ff={md[a + 'feed_forward_length']}",
        f"n_head={heads}",
        f"n_head_kv={md[a + 'attention.head_count_kv']}",
        f"head_dim={e // heads}",
        f"n_rot={md.get(a + 'rope.dimension_count', e // heads)}",
        f"rope_freq_base={np.float32(md[a + 'rope.freq_base'])}",
        f"rms_eps={np.float32(md[a + 'attention.layer_norm_rms_epsilon'])}",
        f"tied_output={int('output.weight' not in names)}",
        f"n_ctx_train={md[a + 'context_length']}",
        "bos_token_id=151643",
    ]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def release(builds, qwen25_tiny, tmp_path_factory) -> Path:
    """A copy of the tiny model's build with model_hparams.txt at its top."""
    b = tmp_path_factory.mktemp("gen") / "b"
    shutil.copytree(builds["qemu"], b)
    (b / "model_hparams.txt").write_text(hparams_text(qwen25_tiny))
    return b


@pytest.fixture(scope="module")
def prompts(builds) -> list[list[int]]:
    return [ids for _, _, ids in BuildDir(builds["qemu"]).smoke_ids[1]]


@pytest.fixture(scope="module")
def llama(llama_reference, qwen25_tiny, prompts):
    return llama_greedy(llama_reference, qwen25_tiny, prompts)


def llama_greedy(llama_reference, model: Path, prompts: list[list[int]]) -> list[tuple[list[int], np.ndarray]]:
    """llama.cpp's greedy tokens and logits for each prompt (8 steps, as generate runs)."""
    llm = llama_reference.model(model, n_ctx=256, n_batch=256, logits_all=True, n_threads=2)
    return [llm.greedy(ids, STEPS) for ids in prompts]


def generate(exe: list, b: Path, ids: list[int], *args, env=SAN_ENV) -> subprocess.CompletedProcess:
    cmd = [*map(str, exe), "generate", *map(str, args), b / REGIONS, b / TENSORS, *ids]
    return subprocess.run(list(map(str, cmd)), capture_output=True, text=True, env=env, timeout=900, check=False)


def parse(stdout: str) -> list[dict]:
    """generate's lines as one dict per step (docs/forward.md)."""
    steps: list[dict] = []
    for line in stdout.splitlines():
        w = line.split()
        if w[0] == "step":
            steps.append({"step": int(w[1]), "pos": int(w[3]), "token": int(w[5]), "margin": float(w[7])})
        elif w[0] == "top":
            steps[-1]["top"] = [(int(w[i]), float(w[i + 1])) for i in range(1, len(w), 2)]
        else:
            what = w[0] if w[0] != "layer" else f"layer {w[1]}"
            at = w.index("norm")
            steps[-1].setdefault("states", {})[what] = (float(w[at + 1]), [float(v) for v in w[at + 3 :]])
    return steps


def run_all(exe: list, b: Path, prompts, tmp: Path, *args, env=SAN_ENV) -> list[tuple[list[int], np.ndarray]]:
    out = []
    tmp = Path(tempfile.mkdtemp(prefix="run-", dir=tmp))  # q25tok writes only a new file: one folder per run
    for i, ids in enumerate(prompts):
        lf = tmp / f"logits{i}.f32"
        r = generate(exe, b, ids, "--files", "--logits", lf, *args, env=env)
        assert r.returncode == 0, r.stderr
        steps = parse(r.stdout)
        assert [s["step"] for s in steps] == list(range(STEPS))
        assert [s["pos"] for s in steps] == [len(ids) - 1 + s for s in range(STEPS)]
        logits = np.fromfile(lf, dtype="<f4").reshape(STEPS, -1)
        assert [s["token"] for s in steps] == [int(np.argmax(row)) for row in logits]
        assert [s["top"][0][0] for s in steps] == [s["token"] for s in steps]
        out.append(([s["token"] for s in steps], logits))
    return out


def agree(ours, ref) -> int:
    """Asserts ours agrees with llama.cpp; returns how many steps were compared. Steps are
    compared until the first whose tokens differ (after that the contexts differ)."""
    compared = 0
    for (tokens, logits), (ref_tokens, ref_logits) in zip(ours, ref):
        for s in range(STEPS):
            a, r = logits[s].astype(np.float64), ref_logits[s].astype(np.float64)
            nmse = float(((a - r) ** 2).sum() / (r**2).sum())
            assert nmse < NMSE, (s, nmse)
            top2 = np.sort(r)[-2:]
            clear = top2[1] - top2[0] > CLEAR * np.sqrt(((a - r) ** 2).mean())
            compared += 1
            if clear:
                assert tokens[s] == ref_tokens[s], (s, tokens, ref_tokens)
            if tokens[s] != ref_tokens[s]:
                break
    return compared


def test_same_tokens_and_logits_as_llama_cpp(san_q25tok, release, prompts, llama, tmp_path):  # noqa: F811
    ours = run_all([san_q25tok], release, prompts, tmp_path)
    assert agree(ours, llama) >= len(prompts) * STEPS // 2
    assert len({tuple(t) for t, _ in ours}) > 1  # the prompts' tokens differ: the model is not degenerate


def test_on_aarch64_under_qemu(arm_q25tok, san_q25tok, release, prompts, llama, tmp_path):  # noqa: F811
    exe = ["qemu-aarch64", "-cpu", "cortex-a53", "-L", QEMU_LIBS, arm_q25tok]
    arm = run_all(exe, release, prompts, tmp_path, env=None)
    assert agree(arm, llama) >= len(prompts) * STEPS // 2
    host = run_all([san_q25tok], release, prompts, tmp_path)
    for (t_arm, l_arm), (t_host, l_host) in zip(arm, host):
        assert t_arm == t_host
        np.testing.assert_allclose(l_arm, l_host, rtol=0, atol=1e-4 * float(np.abs(l_host).max()))


def test_mem_gives_what_files_give_and_a_flipped_byte_shows_at_its_layer(san_q25tok, release, prompts, tmp_path):  # noqa: F811
    ids = prompts[0]
    files = generate([san_q25tok], release, ids, "--files", "--dump-layers")
    assert files.returncode == 0, files.stderr
    mem, dt = loaded([san_q25tok], release, tmp_path)
    r = generate([san_q25tok], release, ids, "--mem", mem, "--dt", dt, "--dump-layers")
    assert r.returncode == 0 and r.stdout == files.stdout, r.stderr
    steps = parse(files.stdout)
    n_layer = int(re.search(r"n_layer=(\d+)", (release / "model_hparams.txt").read_text())[1])
    assert list(steps[0]["states"]) == ["embd", *(f"layer {i}" for i in range(n_layer)), "output"]
    # one byte of blk.1's FFN output matrix, in the reserved region: layer 0 is as before
    pmap = BuildDir(release).partition_map
    t = next(t for t in pmap["tensors"] if t["name"] == "blk.1.ffn_down.weight")
    flip(mem, pmap["regions"][t["region"]]["base"] + t["offset"] + t["bytes"] // 2)
    r = generate([san_q25tok], release, ids, "--mem", mem, "--dt", dt, "--dump-layers")
    assert r.returncode == 0, r.stderr
    bad = parse(r.stdout)[0]["states"]
    first = next(k for k in bad if bad[k] != steps[0]["states"][k])
    assert first == "layer 1"


def test_the_embedding_summary_is_the_embedding_row(san_q25tok, release, prompts, qwen25_tiny):  # noqa: F811
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
    from gguf.quants import dequantize

    ids = prompts[0]
    r = generate([san_q25tok], release, ids, "--files", "--dump-layers", "--steps", "1")
    assert r.returncode == 0, r.stderr
    norm, values = parse(r.stdout)[0]["states"]["embd"]
    with GGUFFile(qwen25_tiny) as f:  # the id's row of blocks, dequantised by gguf-py
        t = f.tensor("token_embd.weight")
        qtype = GGMLQuantizationType(t.ggml_type)
        block, size = GGML_QUANT_SIZES[qtype]
        row_bytes = t.shape[0] // block * size
        raw = np.frombuffer(f.read(t, ids[-1] * row_bytes, (ids[-1] + 1) * row_bytes), dtype=np.uint8)
        row = dequantize(raw, qtype).reshape(-1).astype(np.float32)
    n = len(row)
    assert [np.float32(v) for v in values] == [row[k * n // 4] for k in range(4)]  # %.9g: the float32 exactly
    assert norm == pytest.approx(float(np.sqrt((row.astype(np.float64) ** 2).sum())), rel=1e-12)


def test_the_release_hyperparameters_are_found_by_default(san_q25tok, release, prompts):  # noqa: F811
    r = generate([san_q25tok], release, prompts[0], "--files", "--steps", "2")
    assert r.returncode == 0 and len(parse(r.stdout)) == 2, r.stderr


def _mutate(text: str, key: str, value: str | None) -> str:
    lines = [ln for ln in text.splitlines() if not ln.startswith(key + "=")]
    return "\n".join(lines + ([f"{key}={value}"] if value is not None else [])) + "\n"


@pytest.mark.parametrize(
    ("key", "value", "code"),
    [
        ("n_embd", "64", 9),  # not the tensors' shape
        ("n_vocab", "1000", 9),
        ("n_ff", "128", 9),
        ("n_head", "8", 9),  # head_dim * n_head != n_embd
        ("n_head_kv", "3", 9),  # does not divide n_head
        ("head_dim", "4", 9),
        ("n_rot", "9", 9),
        ("n_layer", "3", 8),  # blk.2 is missing
        ("n_layer", "0", 9),
        ("n_layer", "99999999999", 9),
        ("tied_output", "0", 8),  # no output.weight
        ("tied_output", "2", 9),
        ("rope_freq_base", "nan", 9),
        ("rope_freq_base", "inf", 9),
        ("rms_eps", "0", 9),
        ("rms_eps", "-1e-6", 9),
        ("n_ctx_train", "4", 5),  # the prompt and the steps do not fit
        ("format", "q25deploy-hparams/2", 9),
        ("arch", "llama", 9),
        ("n_embd", None, 9),  # missing
        ("n_embd", "32\nn_embd=32", 9),  # twice
        ("n_embd", "3 2", 9),
        ("comment", "x" * 200, 9),  # a line longer than 128 bytes
    ],
)
def test_hostile_hyperparameters_are_refused(san_q25tok, release, prompts, tmp_path, key, value, code):  # noqa: F811
    bad = tmp_path / "hp.txt"
    bad.write_text(_mutate((release / "model_hparams.txt").read_text(), key, value))
    r = generate([san_q25tok], release, prompts[0], "--files", "--hparams", bad)
    assert r.returncode == code and r.stdout == "", (r.returncode, r.stderr)
    assert len(r.stderr.splitlines()) == 1 and r.stderr.startswith("q25tok: ")


def test_unknown_keys_are_skipped(san_q25tok, release, prompts, tmp_path):  # noqa: F811
    hp = tmp_path / "hp.txt"
    hp.write_text((release / "model_hparams.txt").read_text() + "a_later_key=1\n")
    r = generate([san_q25tok], release, prompts[0], "--files", "--hparams", hp, "--steps", "1")
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize(
    ("name", "edit", "code"),
    [
        ("blk.0.attn_q.weight", lambda w: [*w[:5], str(int(w[5]) // 2), "32,16"], 9),  # not the parameters' shape
        ("blk.0.attn_k.bias", lambda w: w[:4] + ["0x7fffff00"] + w[5:], 6),  # outside its region
        ("blk.1.ffn_up.weight", lambda w: w[:3] + ["9"] + w[4:], 6),  # a region that does not exist
        ("blk.0.ffn_gate.weight", lambda w: [w[0], "16", "IQ2_XXS", *w[3:]], 7),
        ("output_norm.weight", lambda w: ["output_norm.weigh", *w[1:]], 8),
    ],
)
def test_hostile_tensor_tables_are_refused(san_q25tok, release, prompts, tmp_path, name, edit, code):  # noqa: F811
    b = tmp_path / "b"
    shutil.copytree(release, b)
    lines = (b / TENSORS).read_text().splitlines()
    i = next(i for i, ln in enumerate(lines) if ln.split()[0] == name)
    lines[i] = " ".join(edit(lines[i].split()))
    (b / TENSORS).write_text("\n".join(lines) + "\n")
    r = generate([san_q25tok], b, prompts[0], "--files")
    assert r.returncode == code and r.stdout == "", (r.returncode, r.stderr)


def same_at_any_thread_count(exe: list, b: Path, ids: list[int], tmp: Path, counts, *args, env=SAN_ENV) -> None:
    """generate's lines (--dump-layers) and its logits file, byte for byte, for each --threads
    in counts and for the default (the online CPUs): model_forward.c's matmul splits a chunk's
    rows among the threads, each row's arithmetic unchanged."""
    outs = []
    for n in [*counts, None]:
        lf = tmp / f"logits-{n}.f32"
        threads = [] if n is None else ["--threads", n]
        r = generate(exe, b, ids, "--files", "--dump-layers", "--logits", lf, *threads, *args, env=env)
        assert r.returncode == 0, r.stderr
        outs.append((r.stdout, lf.read_bytes()))
    assert len(parse(outs[0][0])) == STEPS and len(outs[0][1]) > 0
    assert all(o == outs[0] for o in outs[1:]), [n for n, o in zip([*counts, None], outs) if o != outs[0]]


def test_any_thread_count_gives_the_same_bytes(san_q25tok, release, prompts, tmp_path):  # noqa: F811
    same_at_any_thread_count([san_q25tok], release, prompts[0], tmp_path, [1, 2, 3])


def test_any_thread_count_gives_the_same_bytes_on_aarch64(arm_q25tok, release, prompts, tmp_path):  # noqa: F811
    exe = ["qemu-aarch64", "-cpu", "cortex-a53", "-L", QEMU_LIBS, arm_q25tok]
    same_at_any_thread_count(exe, release, prompts[0], tmp_path, [1, 2, 3, 4], env=None)


def test_the_worker_threads_race_nowhere(release, prompts, tmp_path):
    """The pool under ThreadSanitizer (the Makefile's build with -fsanitize=thread): three
    threads over the tiny model, a prompt of several batches' chunks and two steps."""
    cc = need_program("cc", "Debian: gcc")
    build = tmp_path / "src"
    shutil.copytree(runtime_sources(), build, ignore=shutil.ignore_patterns(*BUILD_PRODUCT_PATTERNS))
    tsan = "-O1 -g -fsanitize=thread"
    cmd = ["make", "-s", "-C", build, f"CC={cc}", f"CFLAGS={tsan}", f"LDFLAGS={tsan}", "q25tok"]
    subprocess.run(list(map(str, cmd)), check=True, capture_output=True)
    env = {**os.environ, "TSAN_OPTIONS": "halt_on_error=1:exitcode=66"}
    r = generate([build / "q25tok"], release, prompts[0], "--files", "--steps", "2", "--threads", "3", env=env)
    if r.returncode != 0 and "FATAL: ThreadSanitizer" in r.stderr:  # e.g. a kernel's mmap layout it cannot use
        pytest.skip(r.stderr.splitlines()[0])
    assert r.returncode == 0 and "WARNING: ThreadSanitizer" not in r.stderr, r.stderr
    one = generate([build / "q25tok"], release, prompts[0], "--files", "--steps", "2", "--threads", "1", env=env)
    assert one.returncode == 0 and one.stdout == r.stdout, one.stderr


@pytest.mark.parametrize("value", ["0", "x", "65", "-1", ""])
def test_a_thread_count_not_from_1_to_64_is_a_usage_error(san_q25tok, release, prompts, value):  # noqa: F811
    r = generate([san_q25tok], release, prompts[0], "--files", "--threads", value)
    assert r.returncode == 2 and r.stdout == "", (r.returncode, r.stderr)
    assert r.stderr == f"q25tok: generate: --threads {value}: not a number from 1 to 64\n"


def test_usage_and_ids(san_q25tok, release, prompts):  # noqa: F811
    assert generate([san_q25tok], release, [], "--files").returncode == 2
    assert generate([san_q25tok], release, prompts[0], "--files", "--steps", "0").returncode == 2
    r = generate([san_q25tok], release, [151936], "--files")
    assert r.returncode == 4 and "token id out of range" in r.stderr


def forced_is_greedy(exe: list, b: Path, ids: list[int], tmp: Path, env=SAN_ENV) -> None:
    """generate --positions 8 on the prompt and the first 7 greedy tokens (teacher forcing: one
    batched pass) prints byte for byte what greedy --steps 8 prints (the same positions, the
    fed tokens being the argmax), and writes the same logits."""
    tmp = Path(tempfile.mkdtemp(prefix="forced-", dir=tmp))
    greedy = generate(exe, b, ids, "--files", "--dump-layers", "--logits", tmp / "g.f32", "--steps", STEPS, env=env)
    assert greedy.returncode == 0, greedy.stderr
    tokens = [s["token"] for s in parse(greedy.stdout)]
    fed = ids + tokens[:-1]
    forced = generate(exe, b, fed, "--files", "--dump-layers", "--logits", tmp / "f.f32", "--positions", STEPS, env=env)
    assert forced.returncode == 0, forced.stderr
    assert [s["pos"] for s in parse(forced.stdout)] == list(range(len(ids) - 1, len(fed)))
    assert forced.stdout == greedy.stdout
    assert (tmp / "f.f32").read_bytes() == (tmp / "g.f32").read_bytes()


def test_positions_are_the_greedy_steps_when_fed_the_greedy_tokens(san_q25tok, release, prompts, tmp_path):  # noqa: F811
    for ids in prompts[::3]:  # plain text, code, a tool call
        forced_is_greedy([san_q25tok], release, ids, tmp_path)


def test_positions_on_aarch64_under_qemu(arm_q25tok, san_q25tok, release, prompts, tmp_path):  # noqa: F811
    exe = ["qemu-aarch64", "-cpu", "cortex-a53", "-L", QEMU_LIBS, arm_q25tok]
    forced_is_greedy(exe, release, prompts[0], tmp_path, env=None)
    same_at_any_thread_count(exe, release, prompts[0], tmp_path, [1, 4], "--positions", STEPS, env=None)
    # the int8 products are exact and their float32 scaling is done in the same order by the
    # NEON, SSE2 and portable kernels (q25tok_qrow.c): the A53 prints the host's very bytes
    args = ["--files", "--dump-layers", "--positions", STEPS]
    arm = generate(exe, release, prompts[3], *args, env=None)
    host = generate([san_q25tok], release, prompts[3], *args)
    assert arm.returncode == host.returncode == 0 and arm.stdout == host.stdout, arm.stderr + host.stderr


def test_positions_1_is_steps_1(san_q25tok, release, prompts, tmp_path):  # noqa: F811
    for ids in prompts[:2]:
        one = generate(
            [san_q25tok], release, ids, "--files", "--dump-layers", "--logits", tmp_path / "p.f32", "--positions", 1
        )
        step = generate(
            [san_q25tok], release, ids, "--files", "--dump-layers", "--logits", tmp_path / "s.f32", "--steps", 1
        )
        assert one.returncode == step.returncode == 0, one.stderr + step.stderr
        assert one.stdout == step.stdout and len(parse(one.stdout)) == 1
        assert (tmp_path / "p.f32").read_bytes() == (tmp_path / "s.f32").read_bytes()
        (tmp_path / "p.f32").unlink()
        (tmp_path / "s.f32").unlink()


def test_positions_give_the_same_bytes_at_any_thread_count(san_q25tok, release, prompts, tmp_path):  # noqa: F811
    same_at_any_thread_count([san_q25tok], release, prompts[0], tmp_path, [1, 2, 3], "--positions", STEPS)


def test_positions_past_one_batch_are_each_their_prefix_evaluated_alone(san_q25tok, release, prompts):  # noqa: F811
    """70 ids (more than a batch of 64): --positions 8 evaluates them as 62 + 8 (the last batch
    holds the positions reported); a reported position prints what --steps 1 prints for its
    prefix alone, evaluated as one batch (63, 64 ids) or as 64 + the rest (65, 70 ids): a
    position's arithmetic does not depend on how the ids are split into batches."""
    ids = (prompts[0] * 70)[:70]
    forced = generate([san_q25tok], release, ids, "--files", "--dump-layers", "--positions", STEPS)
    assert forced.returncode == 0, forced.stderr
    blocks = re.split(r"(?m)^(?=step )", forced.stdout)[1:]
    assert len(blocks) == STEPS
    for j, block in enumerate(blocks):
        if j not in (0, 1, 2, STEPS - 1):  # 63 and 64 ids (one batch), 65 (64 + 1), 70
            continue
        n = len(ids) - STEPS + j + 1
        alone = generate([san_q25tok], release, ids[:n], "--files", "--dump-layers", "--steps", 1)
        assert alone.returncode == 0, alone.stderr
        assert block == alone.stdout.replace("step 0 ", f"step {j} ", 1), (j, n)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--positions", "0"], "--positions 0: not a number from 1 to 64"),
        (["--positions", "65"], "--positions 65: not a number from 1 to 64"),
        (["--positions", "x"], "--positions x: not a number from 1 to 64"),
        (["--positions", "4"], "--positions 4: more than the 3 ids given"),
        (["--positions", "2", "--steps", "2"], "--positions 2: not with --steps (one or the other)"),
        (["--steps", "1", "--positions", "2"], "--positions 2: not with --steps (one or the other)"),
    ],
)
def test_positions_out_of_range_are_usage_errors(san_q25tok, release, prompts, args, message):  # noqa: F811
    r = generate([san_q25tok], release, prompts[0][:3], "--files", *args)
    assert r.returncode == 2 and r.stdout == "", (r.returncode, r.stderr)
    assert r.stderr == f"q25tok: generate: {message}\n"


@pytest.mark.slow
def test_the_0_5b_shape_agrees_with_llama_cpp(q25tok, arm_q25tok, llama_reference, tmp_path_factory):  # noqa: F811
    """24 layers of 896 (Q4_K / Q6_K / Q5_0 / Q8_0, 14 heads over 2 KV heads, tied Q8_0 head):
    three smoke prompts on this machine against llama.cpp, and the first two steps of one on
    aarch64 under qemu against this machine's; two prompts (8 positions, teacher-forced, as the
    smoke test runs them) on this machine and the first step on aarch64 against the build's
    record of the host reference."""
    from q25deploy.cli import main
    from q25deploy.model.synthetic import write_model

    d = tmp_path_factory.mktemp("gen05")
    model, b = d / "qwen25-0.5b.gguf", d / "b"
    write_model(model, "0.5b", str(Path(__file__).parent.parent / "data" / "ggml-vocab-qwen2.gguf"))
    assert main(["build", "--target", "qemu", "--model", str(model), "--out", str(b), "--forward", "2"]) == 0
    (b / "model_hparams.txt").write_text(hparams_text(model))
    prompts = [ids for _, _, ids in BuildDir(b).smoke_ids[1]][:3]
    ours = run_all([q25tok], b, prompts, d, env=None)
    assert agree(ours, llama_greedy(llama_reference, model, prompts)) >= len(prompts) * STEPS // 2
    qemu = ["qemu-aarch64", "-cpu", "cortex-a53", "-L", QEMU_LIBS, arm_q25tok]
    arm = generate(qemu, b, prompts[0], "--files", "--steps", "2", "--logits", d / "arm.f32", "--dump-layers", env=None)
    assert arm.returncode == 0, arm.stderr
    logits = np.fromfile(d / "arm.f32", dtype="<f4").reshape(2, -1)
    assert [s["token"] for s in parse(arm.stdout)] == ours[0][0][:2]
    np.testing.assert_allclose(logits, ours[0][1][:2], rtol=0, atol=1e-4 * float(np.abs(ours[0][1]).max()))

    # against the host reference, as the smoke test compares them: every layer of every step
    # within record_compare's tolerances (here and on aarch64), the tokens margin-aware
    from q25deploy.model.record_compare import first_difference, parse_dump

    record = BuildDir(b).forward_record
    assert [p["ids"] for p in record["prompts"]] == prompts[:2]  # the GGUF asks for no BOS
    for p in record["prompts"]:  # the smoke test's command: the prompt and its forced continuation
        fed = p["ids"] + p["forced"]
        host = generate([q25tok], b, fed, "--files", "--dump-layers", "--positions", STEPS, env=None)
        assert host.returncode == 0 and first_difference(p, parse_dump(host.stdout)) is None, p["text"]
    p = record["prompts"][0]  # greedy step 0 is the forced record's step 0: the prompt's last position
    assert first_difference({**p, "steps": p["steps"][:1]}, parse_dump(arm.stdout)[:1]) is None
