"""The build's next steps agree with the layer it wrote (issue 45, item 7): where the layer's
``device-tree.bbappend`` adds ``reserved-memory.dtsi`` (meta-xilinx device-tree builds) the
summary asks for no ``/include/`` by hand but as the alternative where the bbappend does not
apply, never both; where the layer has no bbappend (the qemu board) it says so."""

from __future__ import annotations

import re

from q25deploy.cli.app import main

DT = "meta-q25/dynamic-layers/xilinx/recipes-bsp/device-tree"


def next_steps(capsys, out, target, model) -> str:
    capsys.readouterr()
    assert main(["build", "--quiet", "--target", target, "--model", str(model), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    return " ".join(text.split("next steps:", 1)[1].split())


def test_next_steps_leave_the_device_tree_to_the_layers_bbappend(capsys, tmp_path, qwen25_tiny):
    for target in ("kv260", "zcu104"):
        out = tmp_path / target
        steps = next_steps(capsys, out, target, qwen25_tiny)
        bbappend = (out / DT / "device-tree.bbappend").read_text()
        assert re.search(r'EXTRA_DT_INCLUDE_FILES:append:\S+ = " q25-reserved-memory.dtsi"', bbappend)
        step = re.search(r"2\. (.*?) 3\. ", steps).group(1)
        assert "device-tree.bbappend adds reserved-memory.dtsi for meta-xilinx" in step
        assert "nothing to include by hand" in step
        # the hand route only as the other way, where the bbappend does not apply: never both
        hand = step.split("nothing to include by hand.", 1)[1]
        assert hand.startswith(" Only where that bbappend does not apply") and "never both" in hand
        assert "EXTRA_DT_INCLUDE_FILES" not in step  # the layer sets it; the user does not
        readme = " ".join((out / "meta-q25" / "README.md").read_text().split())
        assert "nothing to do by hand. Only where that bbappend does not apply" in readme
        dtsi = (out / "reserved-memory.dtsi").read_text()
        assert "Never both" in dtsi and "list in EXTRA_DT_INCLUDE_FILES" not in dtsi


def test_without_the_bbappend_the_next_steps_say_the_layer_adds_none(capsys, tmp_path, qwen25_tiny):
    out = tmp_path / "qemu"
    step = re.search(r"2\. (.*?) 3\. ", next_steps(capsys, out, "qemu", qwen25_tiny)).group(1)
    assert not (out / DT).exists()
    assert "the layer changes none for this board" in step
    assert "bbappend" not in step.replace(str(out), "OUT")  # the test's own folder names one
