"""A plugin whose commands are broken: one whose arguments cannot be added, one that crashes
when it runs, one that takes a core command's name, one that is no CommandSpec at all."""

from q25deploy.plugin import CommandSpec, hookimpl


def _bad_arguments(parser):
    parser.add_argument("--fine", help="added before the failure")
    parser.add_argument("--fine", help="argparse refuses a second --fine")


def _no_arguments(parser):
    parser.add_argument("--json", action="store_true", help="never used")


def _crash(args, context):
    raise RuntimeError("the vendor's tool is not installed")


@hookimpl
def q25deploy_cli_commands():
    return [
        CommandSpec("badcmd-args", "cannot add its arguments", "Fails in add_arguments.", _bad_arguments, _crash),
        CommandSpec("badcmd-run", "crashes when it runs", "Fails in run.", _no_arguments, _crash),
        CommandSpec("build", "takes a core command's name", "Clashes with build.", _no_arguments, _crash),
    ]
