from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys

import pytest
from ollama_store import add_model

from q25deploy.cli import main


def run(capsys, *argv, stdin: bytes | None = None, monkeypatch=None):
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    code = main(list(map(str, argv)))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def exported(tmp_path_factory, qwen25_tiny):
    out = tmp_path_factory.mktemp("export") / "tok"
    assert main(["export", "tokenizer", str(qwen25_tiny), "--out", str(out)]) == 0
    return out


def test_inspect_human_and_json(capsys, qwen25_tiny):
    code, out, err = run(capsys, "inspect", qwen25_tiny)
    assert code == 0 and err == ""
    assert "151,936 tokens" in out and "Q6_K" in out and "chat template yes" in out
    code, out, _ = run(capsys, "inspect", qwen25_tiny, "--json")
    cat = json.loads(out)
    assert cat["tokenizer"]["tokens"] == 151936 and cat["tokenizer"]["merges"] == 151387
    assert cat["tokenizer"]["eos_token_id"] == 151645
    assert {s["text"] for s in cat["tokenizer"]["special_tokens"]} >= {"<|im_end|>", "<tool_call>"}
    emb = next(t for t in cat["tensors"] if t["name"] == "token_embd.weight")
    assert emb["shape"] == [32, 151936] and emb["type"] == "Q8_0" and emb["bytes"] == 151936 * 34
    assert set(cat["quant_mix"]) == {"F32", "Q8_0", "Q5_0", "Q4_K", "Q6_K"}
    assert cat["metadata"]["tokenizer.ggml.tokens"] == {"type": "array", "element_type": "STRING", "length": 151936}


def test_inspect_ollama_model(capsys, tmp_path, monkeypatch, qwen25_tiny):
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "o"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "c"))
    add_model(tmp_path / "o", "qwen2.5:0.5b", qwen25_tiny)
    code, out, _ = run(capsys, "inspect", "qwen2.5:0.5b", "--json")
    cat = json.loads(out)
    assert code == 0 and cat["model"]["source"] == "ollama" and cat["model"]["ollama"]["license"]


def test_export_writes_every_asset_with_a_manifest(exported):
    manifest = json.loads((exported / "manifest.json").read_text())
    paths = {a["path"]: a for a in manifest["artifacts"]}
    assert set(paths) == {
        "tokens.jsonl",
        "merges.txt",
        "token_types.bin",
        "chat_template.txt",
        "token_index.bin",
        "token_bytes.bin",
        "merge_table_u32.bin",
        "tokenizer.q25tokrt",
        "tokenizer_runtime_image_manifest.json",
    }
    for rel, a in paths.items():
        data = (exported / rel).read_bytes()
        assert a["size"] == len(data) and a["sha256"] == hashlib.sha256(data).hexdigest()
    assert paths["tokenizer.q25tokrt"]["kind"] == "tokenizer-runtime-image"
    lines = (exported / "tokens.jsonl").read_text().splitlines()
    assert json.loads(lines[151657]) == {
        "id": 151657,
        "type": "USER_DEFINED",
        "text": "<tool_call>",
        "bytes": b"<tool_call>".hex(),
    }
    assert json.loads(lines[220])["bytes"] == "20" and json.loads(lines[220])["text"] == "Ġ"
    assert (exported / "merges.txt").read_bytes().split(b"\n")[0] == "Ġ Ġ".encode()
    assert len((exported / "token_types.bin").read_bytes()) == 151936
    assert not [p for p in exported.parent.iterdir() if p.name.startswith(".")]


def test_export_is_reproducible(tmp_path, exported, qwen25_tiny):
    again = tmp_path / "again"
    assert main(["export", "tokenizer", str(qwen25_tiny), "--out", str(again)]) == 0
    for p in exported.iterdir():
        assert (again / p.name).read_bytes() == p.read_bytes(), p.name


def test_tokenize_and_detokenize(capsys, monkeypatch, tmp_path, exported):
    img = exported / "tokenizer.q25tokrt"
    code, out, _ = run(capsys, "tokenize", "--image", img, "Hello world")
    assert (code, out) == (0, "9707 1879\n")
    code, out, _ = run(capsys, "tokenize", "--image", img, "--special", "--json", "<|im_start|>x")
    assert json.loads(out) == {"ids": [151644, 87]}
    code, out, _ = run(capsys, "tokenize", "--image", img, stdin=b"a\r\nb", monkeypatch=monkeypatch)
    assert out == "64 319 65\n"  # \r\n stays one pre-token: raw bytes, no newline translation
    assert json.loads((exported / "tokens.jsonl").read_text().splitlines()[319])["bytes"] == b"\r\n".hex()
    (tmp_path / "1.txt").write_bytes(b"Hello")
    (tmp_path / "2.txt").write_bytes(b"")
    (tmp_path / "3.txt").write_bytes(b" world")
    code, out, _ = run(
        capsys, "tokenize", "--image", img, *[f"--file={tmp_path / n}" for n in ("1.txt", "2.txt", "3.txt")]
    )
    assert out == "9707\n\n1879\n"
    code, out, _ = run(capsys, "detokenize", "--image", img, "151644", "9707", "151645")
    assert out == "Hello"
    code, out, _ = run(capsys, "detokenize", "--image", img, "--special", "151644", "9707")
    assert out == "<|im_start|>Hello"


def _assert_one_line_error(code, err, expected_code, needle):
    assert code == expected_code, err
    assert err.count("\n") == 1 and err.startswith("q25deploy: error: ") and needle in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "mutate, expected_code, needle",
    [
        (lambda d: b"NOPE" + d[4:], 4, "not a GGUF file"),
        (lambda d: d[:-100], 4, "is truncated: it ends at byte"),
        (lambda d: d[: len(d) // 2], 4, "is truncated: it ends at byte"),
        (lambda d: d[:5000], 4, "is truncated: it ends at byte"),
        (lambda d: d[:4] + (1 << 60).to_bytes(8, "little") + d[12:], 4, "claims"),
    ],
)
def test_bad_model_files_leave_no_output(capsys, tmp_path, qwen25_tiny, mutate, expected_code, needle):
    bad = tmp_path / "bad.gguf"
    data = qwen25_tiny.read_bytes()
    bad.write_bytes(mutate(data) if needle != "claims" else data[:8] + (1 << 60).to_bytes(8, "little") + data[16:])
    out_dir = tmp_path / "out"
    code, _, err = run(capsys, "export", "tokenizer", bad, "--out", out_dir)
    _assert_one_line_error(code, err, expected_code, needle)
    assert not out_dir.exists() and os.listdir(tmp_path) == ["bad.gguf"]
    code, _, err = run(capsys, "inspect", bad)
    _assert_one_line_error(code, err, expected_code, needle)


def test_failed_export_keeps_the_previous_output(capsys, tmp_path, exported):
    out_dir = tmp_path / "out"
    shutil.copytree(exported, out_dir)
    before = {p.name: p.read_bytes() for p in out_dir.iterdir()}
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + bytes(100))
    code, _, err = run(capsys, "export", "tokenizer", bad, "--out", out_dir)
    assert code == 4
    assert {p.name: p.read_bytes() for p in out_dir.iterdir()} == before
    assert sorted(os.listdir(tmp_path)) == ["bad.gguf", "out"]


def test_ollama_errors(capsys, tmp_path, monkeypatch, qwen25_tiny):
    root = tmp_path / "o"
    monkeypatch.setenv("OLLAMA_MODELS", str(root))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "c"))
    code, _, err = run(capsys, "inspect", "qwen2.5:0.5b")
    _assert_one_line_error(code, err, 3, "no Ollama model store")
    blob = add_model(root, "qwen2.5:0.5b", qwen25_tiny)
    code, _, err = run(capsys, "inspect", "qwen2.5:7b")
    _assert_one_line_error(code, err, 3, "available: qwen2.5:0.5b")
    data = bytearray(blob.read_bytes())
    data[100] ^= 1
    blob.write_bytes(bytes(data))
    code, _, err = run(capsys, "export", "tokenizer", "qwen2.5:0.5b", "--out", tmp_path / "x")
    _assert_one_line_error(code, err, 3, "does not match the manifest")
    assert not (tmp_path / "x").exists()
    blob.unlink()
    code, _, err = run(capsys, "inspect", "qwen2.5:0.5b")
    _assert_one_line_error(code, err, 3, "is missing")


def test_bad_image_and_bad_ids(capsys, tmp_path, exported):
    img = exported / "tokenizer.q25tokrt"
    code, _, err = run(capsys, "detokenize", "--image", img, "999999")
    _assert_one_line_error(code, err, 7, "out of range")
    code, _, err = run(capsys, "detokenize", "--image", img, "abc")
    _assert_one_line_error(code, err, 2, "not a token id")
    broken = tmp_path / "broken.q25tokrt"
    broken.write_bytes(img.read_bytes()[:-1])
    code, _, err = run(capsys, "tokenize", "--image", broken, "x")
    _assert_one_line_error(code, err, 6, "bad runtime image")
    code, _, err = run(capsys, "tokenize", "--image", tmp_path / "none", "x")
    _assert_one_line_error(code, err, 6, "cannot read image")


def test_non_gpt2_tokenizer_is_refused(capsys, tmp_path):
    from gguf_craft import gguf, kv_str, kv_str_array

    p = tmp_path / "spm.gguf"
    p.write_bytes(gguf([kv_str("tokenizer.ggml.model", "llama"), kv_str_array("tokenizer.ggml.tokens", [b"a"])], []))
    code, _, err = run(capsys, "export", "tokenizer", p, "--out", tmp_path / "o")
    _assert_one_line_error(code, err, 5, "not supported")


def test_installed_console_script(tmp_path, exported):
    """`pip install .` gives a working `q25deploy` (data files included); run from elsewhere."""
    exe = shutil.which("q25deploy")
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("q25deploy is not installed on PATH (CI installs it with pip install .)")
        pytest.skip("q25deploy console script not installed (pip install .)")
    r = subprocess.run(
        [exe, "tokenize", "--image", str(exported / "tokenizer.q25tokrt"), "Hello world"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 0 and r.stdout == "9707 1879\n"
    r = subprocess.run([exe, "--help"], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert "exit codes" in r.stdout


def test_an_error_after_progress_starts_on_a_line_of_its_own(tmp_path, capsys, monkeypatch, vocab_gguf):
    from q25deploy.model.synthetic import write_model

    nolic = tmp_path / "nolic.gguf"
    write_model(nolic, "tiny", str(vocab_gguf), license=None)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)  # progress lines as on a terminal
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    assert main(["build", "--target", "qemu", "--model", str(nolic), "--out", str(tmp_path / "o")]) == 12
    err = capsys.readouterr().err
    assert "qemu  reading " in err  # progress was shown
    before, _, message = err.rpartition("q25deploy: error:")
    assert before.endswith("\r\033[J") and "licence" in message and message.endswith("\n")
    assert "build:" not in err  # no summary for a build that failed


def test_a_mistyped_command_gets_a_suggestion(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["deplyo", "--host", "h"])
    assert exc.value.code == 2
    assert "unknown command 'deplyo': did you mean 'deploy'?" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["build", "--target", "kv26"], "unknown target 'kv26': did you mean 'kv260'? (known: "),
        (["status", "--target", "zcu140", "--host", "h"], "unknown target 'zcu140': did you mean 'zcu104'?"),
    ],
)
def test_a_mistyped_target_gets_a_suggestion(capsys, argv, said):
    assert main(argv) == 2
    assert said in capsys.readouterr().err


def test_the_package_names_its_functions_whatever_was_imported_before():
    """``q25deploy.cli.main`` and ``.run`` are the functions, also once every submodule is
    imported (the submodule ``cli/main.py`` used to replace the lazy ``main`` once loaded),
    and ``python -m q25deploy`` runs the console script's ``q25deploy.cli:run``."""
    code = (
        "import q25deploy.cli.app, q25deploy.cli.build, q25deploy.cli.deploy\n"
        "import q25deploy.cli as cli\n"
        "from q25deploy.cli import main, run\n"
        "assert main is cli.main is q25deploy.cli.app.main and run is cli.run, (main, run)\n"
        "raise SystemExit(main(['targets', '--json']))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "kv260" in {t["name"] for t in json.loads(r.stdout)["targets"]}
    r = subprocess.run([sys.executable, "-m", "q25deploy", "--version"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.startswith("q25deploy "), r.stderr
