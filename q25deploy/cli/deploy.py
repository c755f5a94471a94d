"""The deploy, smoke, status and rollback commands: their shared connection options and
the handler that runs them on every board."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from .. import phases
from ..errors import UsageError
from .common import positive_int, report_failures
from .early import DEFAULT_JOBS, TRANSFERS

#: a host failed (deploy, smoke, rollback, status), the others are unaffected; the code of
#: DeployError in main.EXIT_CODES (main imports this module, so it cannot import main)
EXIT_DEPLOY = 13


def add_commands(sub) -> None:
    """Add deploy, smoke, status and rollback to the CLI's sub-parsers."""
    conn = argparse.ArgumentParser(add_help=False)
    c = conn.add_argument_group("boards and connection")
    c.add_argument("--target", metavar="NAME", help="target board (its SSH defaults, install paths, hooks)")
    c.add_argument("--target-file", metavar="FILE", help="your own board file")
    c.add_argument("--host", action="append", metavar="[USER@]HOST[:PORT]", help="a board (repeatable)")
    c.add_argument("--hosts-file", metavar="F", help="boards, one [user@]host[:port] per line (# comments)")
    c.add_argument(
        "--build",
        metavar="DIR",
        type=Path,
        help="the build to deploy (default q25-build/TARGET); smoke and status work from the board's "
        "own release without it, and with it also compare the board with that build",
    )
    c.add_argument("--identity", metavar="KEY", help="SSH private key")
    c.add_argument(
        "--known-hosts", metavar="FILE", help="known_hosts to check host keys against (default ~/.ssh/known_hosts)"
    )
    c.add_argument(
        "--trust-new-host",
        action="store_true",
        help="record an unknown host key in the known_hosts file (a changed key is always refused)",
    )
    c.add_argument(
        "--remote-root",
        metavar="DIR",
        default="",
        help="put the install directory under DIR on the board (a data partition, a chroot, tests); the "
        "board file's q25tok and /proc/device-tree stay at their system paths; {host}, {port} and "
        "{user} are replaced per board",
    )
    c.add_argument(
        "--become",
        metavar="sudo|doas|none",
        help="a login that is not root gains root with sudo -n or doas -n for every board command "
        "(needs a NOPASSWD rule for it on the board; default: the board file's [ssh] become, else none)",
    )
    c.add_argument("--runtime-bin", metavar="FILE", help="upload this q25tok with the release and smoke-test with it")
    c.add_argument(
        "--jobs",
        type=positive_int,
        default=DEFAULT_JOBS,
        metavar="N",
        help=f"boards in parallel (default {DEFAULT_JOBS})",
    )
    c.add_argument("--json", action="store_true", help="per-host results as JSON")
    dp = sub.add_parser(
        "deploy",
        parents=[conn],
        help="deploy a build to boards: atomic, verified, rolled back",
        description="Send the build's release (runtime image, partitions, map) to each board: only "
        "what the board lacks, staged and sha256-verified on the board, switched by one rename, "
        "smoke-tested, and rolled back automatically when the smoke test fails.",
    )
    dp.add_argument(
        "--tokenizer-only",
        action="store_true",
        help="update only the tokenizer image (refused when its vocabulary differs from the deployed model's)",
    )
    dp.add_argument(
        "--strict", action="store_true", help="a live device tree without the planned regions fails the smoke test"
    )
    dp.add_argument(
        "--allow-unreserved",
        action="store_true",
        help="send a plan the board's live device tree does not reserve (its new image comes later), "
        "with a warning; without it such a board is refused before anything is sent",
    )
    dp.add_argument(
        "--verify-board",
        action="store_true",
        help="also hash the files the board already holds (linked from kept releases) and send again "
        "any that differs: repairs a board whose kept files were damaged",
    )
    dp.add_argument(
        "--transfer",
        choices=TRANSFERS,
        default="auto",
        help="how the session and its files reach the board: auto (default) runs the whole session "
        "through one login of OpenSSH's ssh client, shared by every command and file (no paramiko "
        "loaded: start-up), where ssh is installed, logs in, and there is no --trust-new-host and no "
        "~/.ssh/config; else the paramiko session, with files of 16 MiB and more through ssh logged "
        "in with the session's address, user, key and known_hosts (a third of paramiko's CPU per "
        "byte); openssh: the paramiko session, every such file through ssh (a login each), or fail; "
        "paramiko: everything through the paramiko session",
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
    sm.add_argument("--strict", action="store_true", help="a live device tree without the planned regions fails")
    sm.add_argument("--quick", action="store_true", help="skip hashing the partition files on the board")
    sm.set_defaults(func=cmd_fleet)
    st = sub.add_parser(
        "status",
        parents=[conn],
        help="show what is deployed on boards",
        description="Show each board's current and previous release and whether its state file "
        "and current link agree; exit 13 when a board cannot be read or they disagree.",
    )
    st.add_argument(
        "--svg",
        metavar="FILE",
        help="also write the build's memory map coloured with what each board "
        "reports of its regions (resident, differs, missing, unknown); with several boards FILE must "
        "contain {host}: one file per board (needs --build)",
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
        verify_board=getattr(a, "verify_board", False),
        become=a.become,
        transfer=getattr(a, "transfer", "auto"),
        allow_unreserved=getattr(a, "allow_unreserved", False),
    )
    # the program started the first boards' logins before it loaded the command line's modules
    # (cli/early.py); they are this command's once the target is resolved, and the plugin
    # manager and the deploy modules load while they go on
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
        from ..deploy.boardbase import known_hosts_path

        known_hosts_path(opts.known_hosts)  # a ~user that names nobody: one line, before any login
        opts.build_dir = build_dir
        pending = _begin_logins(a, opts, target.board, getattr(a, "early_logins", None))
        from ..deploy.fleet import Fleet

        return Fleet(opts, target, pm, pending, build)
    except BaseException:
        for login in pending.values():
            login.close()
        raise


def _begin_logins(a: argparse.Namespace, opts, board, started: dict | None = None) -> dict:
    """Logins (host name → :class:`~q25deploy.deploy.sshboard.PendingLogin`) to the first
    ``--jobs`` boards with ``board``'s SSH defaults; of ``started`` (the program's early ones,
    emptied: they are this command's now), those still wanted are kept and the others ended.
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
    from .progress import Progress

    fleet = _fleet(a)  # imports the fleet while the first logins go on
    phases.mark("imports")
    try:
        svgs = _svg_paths(a, fleet)
        prog = Progress()
        fleet.on_bytes = prog.sent if prog.enabled else None
        results = fleet.run(a.command, progress=prog.step)
        prog.done()
    finally:
        fleet.close_pending()
    if a.command == "status":
        if svgs:
            from ..deploy.status_svg import write_status_svgs

            write_status_svgs(svgs, results, fleet.target.board, fleet.partition_map)
        print(json.dumps(results, indent=2) if a.json else "\n".join(map(_status_line, results)))
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


def _status_line(r: dict) -> str:
    """One board's status for the terminal (board text escaped: :func:`~q25deploy.common.printable`)."""
    from ..common import printable

    if "error" in r:
        return printable(f"{r['host']:<28} error: {r['error']}")
    return printable(
        f"{r['host']:<28} current {r['current'] or '-'} previous {r['previous'] or '-'}"
        f"{' image assets ' + r['image']['model_sha256'][:12] if r.get('image') else ''}"
        f"{_reserved_words(r)}"
        f"{' regions ' + r['residency'] if r.get('residency') else ''}{' map ' + r['svg'] if r.get('svg') else ''}"
        f"{'' if r['consistent'] else ' (state and current link disagree)'}"
    )


def _reserved_words(r: dict) -> str:
    """`` reserved yes``, or ``reserved NO (node why, ...)`` when the device tree cannot hold the plan."""
    if "reserved" not in r:
        return ""
    return " reserved " + (
        "yes" if r["reserved"] else "NO (" + ", ".join(f"{u['node']} {u['why']}" for u in r["unreserved"]) + ")"
    )
