"""Built-in target `qemu`: QEMU aarch64 virt, Cortex-A53, 4 GiB — and `q25deploy qemu up|down|status`,
which boots it as a board (modules: ``cli`` parses, ``commands`` handles, ``machine`` makes QEMU's
command line and the device tree, ``vm`` runs QEMU, ``state`` records it, ``yocto`` reads a Yocto
deploy directory)."""

from q25deploy.plugin.hookspecs import CommandSpec, TargetSpec, hookimpl
from q25deploy.resources import data_dir

NAME = "qemu"


@hookimpl
def q25deploy_register_targets():
    return [TargetSpec(NAME, data_dir("targets") / "qemu.toml", "QEMU aarch64 virt, Cortex-A53, 4 GiB")]


@hookimpl
def q25deploy_reserved_memory_dtsi(target, board, plan):
    from q25deploy.board.dtsi import reserved_memory_dtsi

    q = board.qemu
    return reserved_memory_dtsi(
        board,
        plan,
        notes=(
            "QEMU builds its own device tree: `q25deploy qemu up` dumps it, adds this fragment and boots\n"
            "with it (see its --help). By hand: dump it, add this fragment, and boot with -dtb:\n"
            f"  qemu-system-aarch64 -machine {q.get('machine', 'virt')},dumpdtb=virt.dtb -cpu {q.get('cpu', 'cortex-a53')} "
            f"-m {q.get('memory', '4G')} -smp {q.get('smp', 2)}\n"
            "  dtc -I dtb -O dts virt.dtb > virt.dts; echo '/include/ \"reserved-memory.dtsi\"' >> virt.dts\n"
            "  dtc -I dts -O dtb virt.dts > virt-q25.dtb"
        ),
    )


@hookimpl
def q25deploy_layer_files(target, board, build):
    # qemuarm64 has no device-tree recipe: QEMU makes the tree (see reserved-memory.dtsi's notes)
    dt = "dynamic-layers/xilinx/recipes-bsp/device-tree"
    return {f"{dt}/device-tree.bbappend": None, f"{dt}/files/q25-reserved-memory.dtsi": None}


@hookimpl
def q25deploy_cli_commands():
    from . import cli

    return [
        CommandSpec(
            NAME,
            "boot the qemu target as a board: q25deploy qemu up|down|status",
            "The qemu target as a bootable board: boot a kernel with an initramfs or a root disk (or a "
            "Yocto qemuarm64 image) in QEMU with the build's reserved-memory.dtsi, SSH forwarded from "
            "127.0.0.1, daemonised; then deploy and smoke-test against it like a real board.",
            cli.add_arguments,
            cli.run,
            cli.EPILOG,
        )
    ]
