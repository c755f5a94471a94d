"""One build, one release id: `package`'s artifact and `deploy`'s report of the same build agree, and
a deploy that adds to the build (--runtime-bin) names both ids (docs/ota.md, "Release ids")."""

from __future__ import annotations

import json

from deploy_helpers import board_argv, deploy

from q25deploy.cli import main


def _package(capsys, build, out) -> dict:
    capsys.readouterr()
    assert (
        main(["package", "--target", "qemu", "--build", str(build), "--format", "mender", "--out", str(out), "--json"])
        == 0
    )
    return json.loads(capsys.readouterr().out)


def test_package_and_deploy_of_one_build_show_one_release_id(tmp_path, capsys, ssh, models, q25tok):
    art = _package(capsys, models["A"], tmp_path / "a.mender")
    build_id = art["release"]
    assert art["artifact_name"] == f"q25-qemu-release-{build_id}"

    # the build alone: the release the board holds is the artifact's
    code, res, err = deploy(capsys, ssh, ssh["servers"][0], tmp_path / "alone", models["A"])
    assert res, err
    assert res[0]["release"] == res[0]["build_release"] == build_id

    # with --runtime-bin the release holds one more file: another id, and both are named
    srv, root = ssh["servers"][1], tmp_path / "with-q25tok"
    code, res, err = deploy(capsys, ssh, srv, root, models["A"], runtime=q25tok)
    assert code == 0, err
    (r,) = res
    assert r["build_release"] == build_id != r["release"]
    capsys.readouterr()
    code = main(
        board_argv(
            "deploy", ssh, srv, root, "--build", str(models["A"]), "--allow-unreserved", "--runtime-bin", str(q25tok)
        )
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"release {r['release']} is build release {build_id} (the id of `q25deploy package`'s artifact)" in out
