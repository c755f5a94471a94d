"""A plugin whose command hook itself raises (a bug in a third-party plugin)."""

from q25deploy.plugin import hookimpl


@hookimpl
def q25deploy_cli_commands():
    raise RuntimeError("raisecmd cannot list its commands")
