"""The deploy, smoke, status and rollback commands: their shared connection options and
the handler that runs them on every board."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from .. import phases
from ..errors import UsageError
from . import early
from .common import positive_int, report_failures

#: a host failed (deploy, smoke, rollback, status), the others are unaffected; the code of
#: DeployError in main.EXIT_CODES (main imports this module, so it cannot import main)
EXIT_DEPLOY = 13
DEFAULT_JOBS = 4  # --jobs' default
TRANSFERS = ("auto", "openssh", "paramiko")  # --transfer's choices


#: the option groups of the board commands, in the order --help lists them
WHAT, WHERE, HOW, OUTPUT = "what to deploy", "where: the boards", "how: login and checks", "output"


def group(parser: argparse.ArgumentParser, title: str):
    """``parser``'s option group ``title`` (copied from the parent parser), made if missing."""
    found = next((g for g in parser._action_groups if g.title == title), None)
    return found or parser.add_argument_group(title)


def forward_prompts(text: str) -> int | None:
    """``--forward``'s value: a count of smoke prompts, or ``all`` (None)."""
    if text == "all":
        return None
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"not a count of prompts or 'all': {text!r}")
    return n


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


def _common_parent() -> argparse.ArgumentParser:
    """The options deploy, smoke, status and rollback share (each explained in docs/commands.md)."""
    conn = argparse.ArgumentParser(add_help=False)
    what = conn.add_argument_group(WHAT)
    what.add_argument(
        "--build",
        metavar="DIR",
        type=Path,
        help="the build (deploy: default q25-build/TARGET; smoke, status: also compare the board with it)",
    )
    what.add_argument("--runtime-bin", metavar="FILE", help="send this q25tok with the release and test with it")
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
    how = conn.add_argument_group(HOW)
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
    conn = _common_parent()
    dp = sub.add_parser(
        "deploy",
        parents=[conn],
        help="deploy a build to boards: atomic, verified, rolled back",
        description="Send the build's release (runtime image, partitions, map) to each board: only "
        "what the board lacks, staged and sha256-verified on the board, switched by one rename, "
        "smoke-tested, and rolled back automatically when the smoke test fails.",
    )
    group(dp, WHAT).add_argument(
        "--tokenizer-only", action="store_true", help="only the tokenizer image (same vocabulary as deployed)"
    )
    how = group(dp, HOW)
    how.add_argument("--strict", action="store_true", help="fail the smoke test when the device tree lacks the regions")
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
        parents=[conn],
        help="smoke-test what is deployed on boards",
        description="Run q25tok on each board and compare its ids with the host codec's; check "
        "partition digests, the live device tree's reserved memory and that the regions hold the "
        "partitions. Without --build the host codec reads the board's own image (fetched once, "
        "cached by sha256) and the board's partition map: any workstation can check a board.",
    )
    how = group(sm, HOW)
    how.add_argument("--strict", action="store_true", help="a live device tree without the planned regions fails")
    how.add_argument("--quick", action="store_true", help="skip hashing the partition files on the board")
    add_forward_option(how)
    sm.set_defaults(func=cmd_fleet)
    st = sub.add_parser(
        "status",
        parents=[conn],
        help="show what is deployed on boards",
        description="Show each board's current and previous release and whether its state file "
        "and current link agree; exit 13 when a board cannot be read or they disagree.",
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
        parents=[conn],
        help="switch boards back to their previous release",
        description="Switch each board's current link back to the previous release kept on it "
        "and remove the release it replaces; a board without a previous release fails.",
    )
    rb2.set_defaults(func=cmd_fleet)


def _fleet(a: argparse.Namespace):
    from ..deploy.options import Options

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
    )
    # the first boards' logins start now, from the command line argparse accepted whole
    # (cli/early.py); they are this command's once the target is resolved, and the plugin
    # manager and the deploy modules load while they go on
    pending: dict = {}
    try:
        pending = early.begin_logins(a)
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
        from ..deploy.boardbase import known_hosts_path

        known_hosts_path(opts.known_hosts)  # a ~user that names nobody: one line, before any login
        opts.build_dir = build_dir
        pending = _begin_logins(a, opts, target.board, pending)
        from ..deploy.fleet import Fleet

        return Fleet(opts, target, pm, pending, build)
    except BaseException:
        for login in pending.values():
            login.close()
        raise


def _begin_logins(a: argparse.Namespace, opts, board, started: dict | None = None) -> dict:
    """Logins (host name → :class:`~q25deploy.deploy.sshboard.PendingLogin`) to the first
    ``--jobs`` boards with ``board``'s SSH defaults; of ``started`` (the early ones of
    :func:`.early.begin_logins`, emptied), those still wanted are kept and the others ended.
    None while a check that needs no board would fail (a bad ``--become`` or host list: the
    command reports it before any login) or with ``status --svg`` (it reads the build before
    any board is contacted)."""
    from ..deploy.become import prefix as become_prefix
    from ..deploy.options import host_list
    from ..deploy.sshboard import begin_logins
    from ..errors import Q25Error

    mine = dict(started or {})  # taken over: from here on these are this command's to end
    if started:
        started.clear()
    started = mine
    wanted: dict = {}
    try:
        if board is not None and not getattr(a, "svg", None):
            if a.become:
                become_prefix(a.become)
            wanted = {s.name: s for s in host_list(opts, board.ssh_user, board.ssh_port)[: opts.jobs]}
    except Q25Error:
        wanted = {}  # the command's own checks, later, report it
    for name in [n for n in started if n not in wanted or not started[n].matches(opts.identity, opts.known_hosts)]:
        started.pop(name).close()
    return begin_logins(wanted.values(), opts, started)


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
            from ..deploy.status_svg import write_status_svgs

            write_status_svgs(svgs, results, fleet.target.board, fleet.partition_map)
        print(json.dumps(results, indent=2) if a.json else render_status(results))
        _raise_bugs(fleet)
        return EXIT_DEPLOY if any("error" in r or not r["consistent"] for r in results) else 0
    if a.json:
        print(json.dumps([r.as_json() for r in results], indent=2))
    else:
        from ..deploy.fleet import render_results

        print(render_results(results))
    _raise_bugs(fleet)
    return 0 if all(r.ok for r in results) else EXIT_DEPLOY


def _raise_bugs(fleet) -> None:
    """Every board's result is printed; a bug on one of them (not a board's answer: those are
    that board's failure) then ends the command as a bug does (main: exit 70)."""
    if fleet.bugs:
        raise RuntimeError("; ".join(fleet.bugs))


def _svg_paths(a: argparse.Namespace, fleet) -> dict:
    """``status --svg``: each board's file, checked before any board is contacted."""
    if not getattr(a, "svg", None):
        return {}
    if fleet.opts.build_dir is None:
        raise UsageError("status --svg draws a build's memory map: give --build")
    from ..deploy.status_svg import plan_from_map, svg_paths

    paths = svg_paths(a.svg, [h.name for h in fleet.hosts])
    plan_from_map(fleet.partition_map, fleet.target.board)  # the map through the schema, before any board
    return paths


def render_status(results: list[dict]) -> str:
    """The status table, with a header as deploy's has (board text escaped:
    :func:`~q25deploy.common.printable`)."""
    from ..common import printable

    lines = [f"{'host':<28} {'ok':<4} {'current':<17} {'previous':<17} {'reserved':<8} {'regions':<9} detail"]
    for r in results:
        if "error" in r:
            lines.append(printable(f"{r['host']:<28} {'NO':<4} {'-':<17} {'-':<17} {'-':<8} {'-':<9} {r['error']}"))
            continue
        current = r["current"] or ("image" if r.get("image") else "-")
        reserved = "-" if "reserved" not in r else ("yes" if r["reserved"] else "NO")
        detail = [] if r["consistent"] else ["state and current link disagree"]
        if r.get("image"):
            detail.append(f"the image's own assets (model {r['image']['model_sha256'][:12]})")
        if r.get("reserved") is False:
            detail.append("unreserved: " + ", ".join(f"{u['node']} {u['why']}" for u in r["unreserved"]))
        if r.get("svg"):
            detail.append(f"map {r['svg']}")
        lines.append(
            printable(
                f"{r['host']:<28} {'yes' if r['consistent'] else 'NO':<4} {current:<17} {r['previous'] or '-':<17} "
                f"{reserved:<8} {r.get('residency') or '-':<9} {'; '.join(detail)}"
            )
        )
    failed = sum(1 for r in results if "error" in r or not r["consistent"])
    lines.append(f"{len(results) - failed} of {len(results)} host(s) ok" + (f", {failed} failed" if failed else ""))
    return "\n".join(lines)
