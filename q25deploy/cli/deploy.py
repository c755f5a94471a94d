"""The deploy, smoke, status and rollback commands: their shared connection options and
the handler that runs them on every board."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .. import phases
from ..errors import UsageError
from .common import forward_prompts, positive_int, report_failures

#: a host failed (deploy, smoke, rollback, status), the others are unaffected; the code of
#: DeployError in app.EXIT_CODES (app imports this module, so it cannot import app)
EXIT_DEPLOY = 13
EXIT_INTERRUPTED = 130  # app.EXIT_INTERRUPTED: Ctrl-C
DEFAULT_JOBS = 4  # --jobs' default
TRANSFERS = ("auto", "openssh", "paramiko")  # --transfer's choices


#: the option groups of the board commands, in the order --help lists them, each named for its
#: command (WHAT[command], HOW[command])
WHAT = {
    "deploy": "what to deploy",
    "smoke": "what to check the boards against",
    "status": "what to compare the boards with",
    "rollback": "what the boards run",
}
WHERE, OUTPUT = "where: the boards", "output"
HOW = {
    "deploy": "how: login and checks",
    "smoke": "how: login and checks",
    "status": "how: login",
    "rollback": "how: login",
}

#: --build's and --runtime-bin's help, per command
BUILD_HELP = {
    "deploy": "the build to send (default q25-build/TARGET)",
    "smoke": "the build to check the boards against (default: each board's own release)",
    "status": "the build to compare the boards with (--svg draws its memory map)",
    "rollback": "the build the boards were deployed from (checked against --target; nothing is sent)",
}
DEPLOYED_BIN = (
    "the q25tok you deployed with --runtime-bin: the release's copy is run when its sha256 is this "
    "file's (nothing is sent)"
)
RUNTIME_HELP = {
    "deploy": "send this q25tok with the release and smoke-test with it",
    "smoke": DEPLOYED_BIN,
    "status": DEPLOYED_BIN,
    "rollback": DEPLOYED_BIN,
}
#: what --strict does: every warning of the smoke test (deploy/ops/smoke.py, forward_check.py) fails it
STRICT_HELP = (
    "every smoke-test warning fails the test: regions not in the live device tree or not loaded, "
    "no probe or forward pass"
)


def group(parser: argparse.ArgumentParser, title: str):
    """``parser``'s option group ``title`` (copied from the parent parser), made if missing."""
    found = next((g for g in parser._action_groups if g.title == title), None)
    return found or parser.add_argument_group(title)


def add_forward_option(g) -> None:
    g.add_argument(
        "--forward",
        type=forward_prompts,
        default=1,
        metavar="N|all",
        help="run the model on the board for the first N smoke prompts of the build's record and compare "
        "with the host (default 1; 0: not run; docs/forward.md)",
    )


def add_output_options(g) -> None:
    """``--json`` and ``--quiet``: the output options of a command with live progress."""
    g.add_argument("--json", action="store_true", help="results as JSON (no progress)")
    g.add_argument("--quiet", action="store_true", help="no live progress on the terminal")


def _common_parent(command: str) -> argparse.ArgumentParser:
    """The options deploy, smoke, status and rollback share (each explained in docs/commands.md),
    in groups named for ``command``."""
    conn = argparse.ArgumentParser(add_help=False)
    what = conn.add_argument_group(WHAT[command])
    what.add_argument("--build", metavar="DIR", type=Path, help=BUILD_HELP[command])
    what.add_argument("--runtime-bin", metavar="FILE", help=RUNTIME_HELP[command])
    where = conn.add_argument_group(WHERE)
    where.add_argument("--target", metavar="NAME", help="the board type: its SSH defaults, paths, hooks")
    where.add_argument("--target-file", metavar="FILE", help="your own board file")
    where.add_argument("--host", action="append", metavar="[USER@]HOST[:PORT]", help="a board (repeatable)")
    where.add_argument("--hosts-file", metavar="F", help="boards, one [user@]host[:port] per line (# comments)")
    where.add_argument(
        "--remote-root",
        metavar="DIR",
        default="",
        help="install under DIR on the board ({host} {port} {user} replaced)",
    )
    how = conn.add_argument_group(HOW[command])
    how.add_argument("--identity", metavar="KEY", help="SSH private key")
    how.add_argument("--known-hosts", metavar="FILE", help="host keys to check against (default ~/.ssh/known_hosts)")
    how.add_argument(
        "--trust-new-host",
        action="store_true",
        help="record an unknown host key (creating FILE if missing); a changed key is always refused",
    )
    how.add_argument(
        "--become", metavar="sudo|doas|none", help="gain root with sudo -n or doas -n (default: the board file's)"
    )
    how.add_argument(
        "--jobs",
        type=positive_int,
        default=DEFAULT_JOBS,
        metavar="N",
        help=f"boards in parallel (default {DEFAULT_JOBS})",
    )
    add_output_options(conn.add_argument_group(OUTPUT))
    return conn


def add_commands(sub) -> None:
    """Add deploy, smoke, status and rollback to the CLI's sub-parsers."""
    dp = sub.add_parser(
        "deploy",
        parents=[_common_parent("deploy")],
        help="deploy a build to boards: atomic, verified, rolled back",
        description="Send the build's release (runtime image, partitions, map) to each board: only "
        "what the board lacks, staged and sha256-verified on the board, switched by one rename, "
        "smoke-tested, and rolled back automatically when the smoke test fails.",
    )
    group(dp, WHAT["deploy"]).add_argument(
        "--tokenizer-only", action="store_true", help="only the tokenizer image (same vocabulary as deployed)"
    )
    how = group(dp, HOW["deploy"])
    how.add_argument("--strict", action="store_true", help=STRICT_HELP + " (and the board rolls back)")
    add_forward_option(how)
    how.add_argument(
        "--allow-unreserved",
        action="store_true",
        help="send even when the board's device tree does not reserve the plan",
    )
    how.add_argument(
        "--verify-board", action="store_true", help="also hash the files the board already holds; resend what differs"
    )
    how.add_argument(
        "--transfer",
        choices=TRANSFERS,
        default="auto",
        help="auto (default): OpenSSH's ssh where it can carry the session, else paramiko; "
        "openssh; paramiko (details: docs/commands.md)",
    )
    dp.set_defaults(func=cmd_fleet)
    sm = sub.add_parser(
        "smoke",
        parents=[_common_parent("smoke")],
        help="smoke-test what is deployed on boards",
        description="Run q25tok on each board and compare its ids with the host codec's; check "
        "partition digests, the live device tree's reserved memory and that the regions hold the "
        "partitions. Without --build the host codec reads the board's own image (fetched once, "
        "cached by sha256) and the board's partition map: any workstation can check a board.",
    )
    how = group(sm, HOW["smoke"])
    how.add_argument("--strict", action="store_true", help=STRICT_HELP)
    how.add_argument("--quick", action="store_true", help="skip hashing the partition files on the board")
    add_forward_option(how)
    sm.set_defaults(func=cmd_fleet)
    st = sub.add_parser(
        "status",
        parents=[_common_parent("status")],
        help="show what is deployed on boards",
        description="Show each board's current and previous release and whether its state file "
        "and current link agree; exit 13 when a board cannot be read or they disagree.",
    )
    group(st, HOW["status"]).add_argument(
        "--verify",
        action="store_true",
        help="read every reserved region back (q25tok verify) even when this boot's load record says "
        "they hold the current partitions",
    )
    group(st, OUTPUT).add_argument(
        "--svg",
        metavar="FILE",
        help="also draw the build's memory map as the board reports it (needs --build; several "
        "boards: FILE has {host})",
    )
    st.set_defaults(func=cmd_fleet)
    rb2 = sub.add_parser(
        "rollback",
        parents=[_common_parent("rollback")],
        help="switch boards back to their previous release",
        description="Switch each board's current link back to the previous release kept on it "
        "and remove the release it replaces; a board without a previous release fails.",
    )
    rb2.set_defaults(func=cmd_fleet)


def _fleet(a: argparse.Namespace):
    from ..deploy.ops.options import Options
    from ..deploy.transport.identity import check_identity

    check_identity(a.identity)  # a key that can log in nowhere: exit 2, before any board is contacted

    opts = Options(
        hosts=a.host or [],
        hosts_file=a.hosts_file,
        build_dir=None,
        identity=a.identity,
        known_hosts=a.known_hosts,
        trust_new_host=a.trust_new_host,
        remote_root=a.remote_root or "",
        runtime_bin=a.runtime_bin,
        jobs=a.jobs,
        tokenizer_only=getattr(a, "tokenizer_only", False),
        strict=getattr(a, "strict", False),
        quick=getattr(a, "quick", False),
        forward_prompts=getattr(a, "forward", 1),
        verify_board=getattr(a, "verify_board", False),
        become=a.become,
        transfer=getattr(a, "transfer", "auto"),
        allow_unreserved=getattr(a, "allow_unreserved", False),
        # --svg colours each region by what is read back from it
        verify_regions=getattr(a, "verify", False) or bool(getattr(a, "svg", None)),
    )
    # the first boards' logins start once the parsed arguments and the target name the hosts
    # and every check before a login has passed; the fleet's modules load while they go on
    pending: dict = {}
    try:
        from ..plugin.manager import make_plugin_manager, resolve_target

        pm, failures = make_plugin_manager()
        target = resolve_target(pm, failures, a.target, a.target_file)
        report_failures(failures)
        build_dir = a.build or (Path("q25-build") / target.name if a.command == "deploy" else None)
        build = None
        if build_dir is not None:  # the build through the schema, its regions ours: before any login
            if not (build_dir / "manifest.json").is_file():
                raise UsageError(
                    f"{build_dir}: no build there (run q25deploy build --target {target.name}, or give --build)"
                )
            from ..builddir import BuildDir

            build = BuildDir(build_dir)
            build.check_for(target.board)
            recorded = build.forward_record
            if recorded and opts.forward_prompts and opts.forward_prompts > len(recorded["prompts"]):
                raise UsageError(
                    f"--forward {opts.forward_prompts}: {build_dir} recorded the forward pass on "
                    f"{len(recorded['prompts'])} smoke prompt(s): build it again with --forward "
                    f"{opts.forward_prompts} (or all), or ask for fewer"
                )
        from ..deploy.transport.boardbase import known_hosts_path

        known_hosts_path(opts.known_hosts)  # a ~user that names nobody: one line, before any login
        opts.build_dir = build_dir
        pending = _begin_logins(a, opts, target.board)
        from ..deploy.ops.fleet import Fleet

        return Fleet(opts, target, pm, pending, build)
    except BaseException:
        for login in pending.values():
            login.close()
        raise


def _begin_logins(a: argparse.Namespace, opts, board) -> dict:
    """Logins (host name → :class:`~q25deploy.deploy.transport.sshboard.PendingLogin`) to the first
    ``--jobs`` boards with ``board``'s SSH defaults, under way in the background. Empty while
    a check that needs no board would fail (a bad ``--become`` or host list: the command reports
    it before any login) or with ``status --svg`` (it reads the build before any board is
    contacted)."""
    from ..deploy.ops.options import host_list
    from ..deploy.transport.become import prefix as become_prefix
    from ..deploy.transport.sshboard import begin_logins
    from ..errors import Q25Error

    if getattr(a, "svg", None):
        return {}
    try:
        if a.become:
            become_prefix(a.become)
        wanted = host_list(opts, board.ssh_user, board.ssh_port)[: opts.jobs]
    except Q25Error:
        return {}  # the command's own checks, later, report it
    return begin_logins(wanted, opts)


def cmd_fleet(a: argparse.Namespace) -> int:
    from .progress import Progress, wanted

    fleet = _fleet(a)  # imports the fleet while the first logins go on
    phases.mark("imports")
    try:
        svgs = _svg_paths(a, fleet)
        prog = Progress(enabled=wanted(quiet=a.quiet, json=a.json))
        if prog.enabled:
            fleet.watch = prog
        with prog.running(a.command):
            results = fleet.run(a.command)
    finally:
        fleet.close_pending()
    if a.command == "status":
        if svgs:
            from ..deploy.ops.status_svg import write_status_svgs

            write_status_svgs(svgs, results, fleet.target.board, fleet.partition_map)
        from .board_report import render_status

        print(json.dumps(results, indent=2) if a.json else render_status(results))
        _raise_bugs(fleet)
        if fleet.interrupted:
            return _interrupted()
        return EXIT_DEPLOY if any("error" in r or not r["consistent"] for r in results) else 0
    if a.json:
        print(json.dumps([r.as_json() for r in results], indent=2))
    else:
        from .board_report import render_results

        print(render_results(results, a.command))
    _raise_bugs(fleet)
    if fleet.interrupted:
        return _interrupted()
    return 0 if all(r.ok for r in results) else EXIT_DEPLOY


def _interrupted() -> int:
    """Ctrl-C stopped the command: each board's line said where; exit 130 (app.EXIT_INTERRUPTED)."""
    print("q25deploy: interrupted", file=sys.stderr)
    return EXIT_INTERRUPTED


def _raise_bugs(fleet) -> None:
    """Every board's result is printed; a bug on one of them (not a board's answer: those are
    that board's failure) then ends the command as a bug does (app: exit 70)."""
    if fleet.bugs:
        raise RuntimeError("; ".join(fleet.bugs))


def _svg_paths(a: argparse.Namespace, fleet) -> dict:
    """``status --svg``: each board's file, checked before any board is contacted."""
    if not getattr(a, "svg", None):
        return {}
    if fleet.opts.build_dir is None:
        raise UsageError("status --svg draws a build's memory map: give --build")
    from ..deploy.ops.status_svg import plan_from_map, svg_paths

    paths = svg_paths(a.svg, [h.name for h in fleet.hosts])
    plan_from_map(fleet.partition_map, fleet.target.board)  # the map through the schema, before any board
    return paths
