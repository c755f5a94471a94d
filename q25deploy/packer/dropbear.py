"""The layer's dropbear bbappend: dropbear's receive window (``-W``) when the board file asks
(``[ssh] dropbear_receive_window`` > 0; the default 0 leaves dropbear as OE-core builds it).

Off by default: it changes a recipe outside this layer (OE-core's dropbear) for every MACHINE
of the build, which a user should choose (and yocto-check-layer's signature test forbids for
a layer that is merely added). The figures that justify it are in the template's comment and
in docs/boards.md; bench/bench_ssh_transport.py measures them. Template:
``recipes/dropbear/recipes-core/dropbear/dropbear_%.bbappend.in``.
"""

from __future__ import annotations

from ..resources import data_dir
from .layer import LayerFile, machines, render

BBAPPEND = "recipes-core/dropbear/dropbear_%.bbappend"
# measured with bench/bench_ssh_transport.py (the template's comment, one line each)
FIGURES = (
    "#   dropbear's 24 KiB default  2.8 MB/s (q25deploy's upload), dropbear's CPU 441 ms per MB",
    "#   -W 1048576 (1 MiB)         6.0 MB/s, 220 ms per MB",
    "#   -W 4194304 (4 MiB)         6.8 MB/s, 219 ms per MB",
    "#   (OpenSSH 9.2 with AES-GCM: 10.4 MB/s; 16 MB, 2 vCPUs under QEMU TCG on a shared host)",
)


def dropbear_layer_files(board) -> list[LayerFile]:
    """The bbappend for the board's ``dropbear_receive_window`` (validated at load: an
    integer up to dropbear's maximum), or nothing."""
    window = board.dropbear_receive_window
    if not window:
        return []
    blocks = [
        f'PACKAGE_ARCH:{m} = "${{MACHINE_ARCH}}"\n'
        "# nooelint: oelint.func.specific - a MACHINE of the board's BSP layer, unknown to oelint-adv\n"
        f"do_install:append:{m}() {{\n"
        f"    q25_dropbear_receive_window ${{D}}${{sysconfdir}}/default/dropbear {int(window)}\n}}"
        for m in machines(board)
    ]  # MACHINE names: checked by the board file loader
    template = (data_dir("recipes") / "dropbear" / f"{BBAPPEND}.in").read_text()
    text = render(
        template,
        {
            "BOARD": board.name,
            "MACHINES": ", ".join(machines(board)),
            "MACHINE_BLOCKS": "\n".join(blocks),
            "FIGURES": "\n".join(FIGURES),
        },
    )
    return [LayerFile(BBAPPEND, text.encode())]
