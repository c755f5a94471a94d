"""The first boards' SSH logins, started as soon as the command line has been parsed.

An OpenSSH login to a board and loading the plugin manager, resolving the target and
importing the deploy modules are each a good part of a quick command's time, so a board
command (``deploy``, ``smoke``, ``status``, ``rollback``) starts logging in to its first
``--jobs`` boards (:func:`begin_logins`) the moment it runs, from the arguments argparse has
accepted, the whole command line, values and all (cli/main.py: the one parser; nothing here
reads ``sys.argv``), and adopts those logins once the target is resolved
(:func:`q25deploy.cli.deploy._begin_logins`), ending any it would not have made itself.
Nothing runs on a board before that: a login only starts a shell that waits for the
session's commands.

It logs in only where the command's own checks before its first login would pass too: the
board file (``--target-file``, else the built-in ``--target``'s: a plugin may provide another,
and the command ends a login that does not match it), the hosts (a hosts file is read once,
see :func:`~q25deploy.deploy.options.hosts_file_lines`), ``--become``, the known_hosts path,
and the build directory (``--build``, deploy's default) read through the schema with its
regions checked against the board file (:meth:`~q25deploy.builddir.BuildDir.check_for`).
``status --svg``, or any error at all, starts nothing: the command then reports what is
wrong, in one line, before any board is contacted.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def begin_logins(a: argparse.Namespace) -> dict:
    """Logins (host name → :class:`~q25deploy.deploy.sshboard.PendingLogin`) to the first
    ``--jobs`` boards of the board command argparse parsed into ``a``; empty where a check
    the command makes before it contacts a board would fail (it then says why, in one line)."""
    if getattr(a, "svg", None):
        return {}
    try:
        return _begin(a)
    except Exception:  # whatever it is, the command meets it again and reports it before any login
        return {}


def _begin(a: argparse.Namespace) -> dict:
    board = _board(a)
    if board is None:
        return {}
    from ..deploy.become import prefix as become_prefix
    from ..deploy.boardbase import known_hosts_path
    from ..deploy.options import Options, host_list
    from ..deploy.sshboard import begin_logins as start

    if a.become:
        become_prefix(a.become)
    build = a.build or (Path("q25-build") / (a.target or board.name) if a.command == "deploy" else None)
    if build is not None:
        from ..builddir import BuildDir

        BuildDir(build).check_for(board)  # a build that does not check out: no login
    known_hosts_path(a.known_hosts)
    wanted = Options(
        hosts=a.host or [],
        hosts_file=a.hosts_file,
        build_dir=None,
        identity=a.identity,
        known_hosts=a.known_hosts,
        trust_new_host=a.trust_new_host,
        remote_root="",
        runtime_bin=None,
        jobs=a.jobs,
        transfer=getattr(a, "transfer", "auto"),
    )
    return start(host_list(wanted, board.ssh_user, board.ssh_port)[: a.jobs], wanted, {})


def _board(a: argparse.Namespace):
    """The board file ``--target-file`` names, else the built-in ``--target``'s, else None."""
    from ..board.boardfile import load_board
    from ..resources import data_dir

    if a.target_file:
        return load_board(a.target_file)
    if a.target:
        path = data_dir("targets") / f"{a.target}.toml"
        return load_board(path) if path.is_file() else None
    return None
