"""The deploy commands' arguments and build directory fail cleanly (exit 1 or 2, one line),
never as an internal error (70), and before any board is contacted."""

from __future__ import annotations

import json
import shutil

import pytest

from q25deploy.cli import main


def run(capsys, *argv):
    capsys.readouterr()
    code = main(list(map(str, argv)))
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    "host, what",
    [
        ("a:b", "bad port"),
        ("a:0", "bad port"),
        ("a:70000", "bad port"),
        ("[::1]x", "bad host"),
        ("u@", "bad host"),
        ("a b", "bad host"),
    ],
)
def test_bad_host_is_a_usage_error(capsys, builds, host, what):
    code, err = run(capsys, "deploy", "--target", "qemu", "--build", builds["qemu"], "--host", host)
    assert code == 2 and what in err and len(err.strip().splitlines()) == 1


def test_no_host_is_a_usage_error(capsys, builds):
    code, err = run(capsys, "status", "--target", "qemu", "--build", builds["qemu"])
    assert code == 2 and "--host" in err


def test_an_unknown_become_method_is_a_usage_error(capsys, builds):
    code, err = run(
        capsys, "smoke", "--target", "qemu", "--build", builds["qemu"], "--host", "127.0.0.1:9", "--become", "su"
    )
    assert code == 2 and "--become 'su': use one of none, sudo, doas" in err and len(err.strip().splitlines()) == 1


def test_jobs_zero_is_refused(capsys, builds):
    with pytest.raises(SystemExit) as e:
        main(["deploy", "--target", "qemu", "--build", str(builds["qemu"]), "--host", "a", "--jobs", "0"])
    assert e.value.code == 2 and "--jobs" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["deploy"], ["smoke"], ["package", "--format", "mender"]])
@pytest.mark.parametrize("text", ["{not json", '{"image": {"path": "../../../../etc/shadow"}}', "[]"])
def test_a_corrupt_build_json_is_a_clean_error(capsys, builds, tmp_path, command, text):
    b = tmp_path / "b"
    shutil.copytree(builds["qemu"], b)
    (b / "build.json").write_text(text)
    extra = ["--host", "127.0.0.1:9"] if command[0] != "package" else ["--out", tmp_path / "x.mender"]
    code, err = run(capsys, *command, "--target", "qemu", "--build", b, *extra)
    assert code in (1, 2), err
    assert "build.json" in err and len(err.strip().splitlines()) == 1 and "internal" not in err


def test_a_tampered_manifest_is_refused_before_connecting(capsys, builds, tmp_path):
    b = tmp_path / "b"
    shutil.copytree(builds["qemu"], b)
    m = json.loads((b / "manifest.json").read_text())
    for a in m["artifacts"]:
        if a["path"].startswith("partitions/"):
            a["path"] = "partitions/../../../../x"
    (b / "manifest.json").write_text(json.dumps(m))
    code, err = run(capsys, "deploy", "--target", "qemu", "--build", b, "--host", "127.0.0.1:9")
    assert code == 1 and "manifest.json" in err and "partitions/../../../../x" in err
