"""Built-in target `kv260`: AMD Kria KV260 (K26 SOM): 4 GiB DDR in two banks; model regions go to the high bank."""

from q25deploy.plugin.hookspecs import TargetSpec, hookimpl
from q25deploy.resources import data_dir

NAME = "kv260"


@hookimpl
def q25deploy_register_targets():
    return [
        TargetSpec(
            NAME,
            data_dir("targets") / "kv260.toml",
            "AMD Kria KV260 (K26 SOM): 4 GiB DDR in two banks; model regions go to the high bank",
        )
    ]


@hookimpl
def q25deploy_reserved_memory_dtsi(target, board, plan):
    from q25deploy.board.dtsi import reserved_memory_dtsi

    return reserved_memory_dtsi(
        board,
        plan,
        notes=(
            "Kria: arm64 reads reserved memory once at boot, so this cannot come from an accelerator\n"
            "app's overlay (xmutil loadapp): it belongs in the base device tree (system-user.dtsi)."
        ),
    )
