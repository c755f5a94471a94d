"""Built-in target `zcu104`: AMD ZCU104: 2 GiB PS DDR4."""

from q25deploy.plugin.hookspecs import TargetSpec, hookimpl
from q25deploy.resources import data_dir

NAME = "zcu104"


@hookimpl
def q25deploy_register_targets():
    return [TargetSpec(NAME, data_dir("targets") / "zcu104.toml", "AMD ZCU104: 2 GiB PS DDR4")]
