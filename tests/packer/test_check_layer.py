"""OE-core's yocto-check-layer (the Yocto Project Compatible checks) on the layer that
``q25deploy build --target kv260`` emits, on scarthgap, the way the compatibility programme
runs it: a build directory with only OE-core in bblayers.conf, ``--no-auto
--no-auto-dependency`` (tools/check_layer.sh), every common test judged by its own result
(:func:`yocto_checks.check_layer_problems`), and the tool's own summary and exit status.

Minutes (OE-core's world parsed without the layer, with it, and with the check-layer class):
in the campaign tier. ``Q25_YOCTO_CHECK_LAYER=all`` adds the qemu layer and kv260's with
meta-arm, meta-arm-toolchain and meta-xilinx-core as dependencies."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from yocto import LAYER, snapshots
from yocto_checks import COMMON_TESTS, check_layer_problems, check_layer_results

from q25deploy.cli import main

SERIES = "scarthgap"
MAINTAINER = "q25deploy test <q25deploy-test@example.org>"
CASES = [("kv260", "")]
if os.environ.get("Q25_YOCTO_CHECK_LAYER") == "all":
    CASES += [("qemu", ""), ("kv260", "xilinx")]

# a scarthgap log's lines, as its unittest runner writes them through the tool's logger
SAMPLE = """\
INFO: setUpClass (bsp.BSPCheckLayer)
INFO:  ... skipped "BSPCheckLayer: Layer meta-q25 isn't BSP one."
INFO: test_layerseries_compat (common.CommonCheckLayer.test_layerseries_compat)
INFO:  ... ok
INFO: test_parse (common.CommonCheckLayer.test_parse)
INFO:  ... ok
INFO: test_patches_upstream_status (common.CommonCheckLayer.test_patches_upstream_status)
INFO:  ... unexpected success
INFO: test_readme (common.CommonCheckLayer.test_readme)
INFO:  ... FAIL
INFO: test_show_environment (common.CommonCheckLayer.test_show_environment)
INFO:  ... ok
INFO: test_signatures (common.CommonCheckLayer.test_signatures)
INFO:  ... ok
INFO: test_world (common.CommonCheckLayer.test_world) ... ok
INFO: test_world_inherit_class (common.CommonCheckLayer.test_world_inherit_class)
INFO:  ... ok
INFO: meta-q25 ... FAIL
"""


def test_the_log_is_judged_test_by_test():
    results = check_layer_results(SAMPLE)
    assert set(results) == set(COMMON_TESTS)
    # the README's failure is the one problem: the patch test's unexpected success is a pass
    assert check_layer_problems(results) == ["test_readme: FAIL"]
    passed = SAMPLE.replace(" ... FAIL\nINFO: test_show", " ... ok\nINFO: test_show")
    assert check_layer_problems(check_layer_results(passed)) == []
    # a test that never ran (a tool that stopped early) is a problem too
    missing = passed.replace("test_signatures (common.CommonCheckLayer.test_signatures)", "test_signatures")
    assert check_layer_problems(check_layer_results(missing)) == ["test_signatures: not run"]
    # an unexpected success is accepted only where scarthgap's marker explains it
    odd = passed.replace("test_world) ... ok", "test_world) ... unexpected success")
    assert check_layer_problems(check_layer_results(odd)) == ["test_world: unexpected success"]


@pytest.mark.slow
@pytest.mark.parametrize("board, deps", CASES, ids=[f"{b}{'-' + d if d else ''}" for b, d in CASES])
def test_yocto_check_layer(tmp_path, qwen25_tiny, ws, board, deps, campaign):
    out = ws.root / f"check-layer-{board}"
    shutil.rmtree(out, ignore_errors=True)
    args = ["build", "--target", board, "--model", str(qwen25_tiny), "--out", str(out)]
    assert main([*args, "--layer-maintainer", MAINTAINER]) == 0
    script = ws.root / "check_layer.sh"
    shutil.copyfile(Path(__file__).resolve().parents[2] / "tools" / "check_layer.sh", script)
    tree = ws.tree(SERIES)
    log = tree / "build-check-layer" / "check-layer.log"
    log.unlink(missing_ok=True)
    ws.chown(out)
    ws.chown(script)
    env = {
        "HOME": ws.home(),
        "PATH": "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin",
        "Q25_YOCTO_SNAPSHOTS": str(snapshots()),
        "Q25_CHECK_LAYER_WORKDIR": str(ws.root),
    }
    t0 = time.monotonic()
    r = subprocess.run(
        ws.as_user(["bash", str(script), str(out / LAYER), SERIES, *([deps] if deps else [])], env),
        cwd=ws.root,
        capture_output=True,
        text=True,
        timeout=3000,
        check=False,
    )
    ws.timings.append(
        (f"{SERIES}: yocto-check-layer ({board}{', ' + deps if deps else ''})", time.monotonic() - t0, "")
    )
    # the tool logs to stdout and to its --output-log alike: both are read, the log file kept for a person
    text = r.stdout + r.stderr + (log.read_text(errors="replace") if log.is_file() else "")
    results = check_layer_results(text)
    assert check_layer_problems(results) == [], f"{log}:\n{(r.stdout + r.stderr)[-6000:]}"
    assert r.returncode == 0, (r.stdout + r.stderr)[-6000:]
    # the layer under test, and not a dependency the tool found by itself, in its summary
    assert re.search(r"^INFO: meta-q25 \.\.\. PASS$", text, re.M), text[-3000:]
    assert "openembedded-core ..." not in text
