"""The first boards' SSH logins, started before the command line's own modules load.

An OpenSSH login to a board takes 0.13 s on loopback here, loading argparse, every command
group and the plugin manager 0.04-0.06 s: ``deploy``, ``smoke``, ``status`` and ``rollback``
start logging in to their first ``--jobs`` boards as soon as this reads which boards and board
file the command line names (:func:`begin_logins`), and the command adopts those logins once
it has parsed its arguments for real (:func:`q25deploy.cli.deploy._begin_logins`), ending any
it would not have made itself. Nothing runs on a board before that: a login only starts a
shell that waits for the session's commands.

This reads the command line only where argparse would read it the same way: the command
word first, then only that command's own long options (``--opt VALUE`` or ``--opt=VALUE``,
each exactly as spelt there; tests/cli/test_early.py holds each command's set to the
parser's), and values that pass the parser's checks. It logs in only where the command's
own checks before its first login would pass too: the hosts (a hosts file is read once, see
:func:`~q25deploy.deploy.options.hosts_file_lines`), ``--become``, the known_hosts path, and
the build directory (``--build``, deploy's default) read through the schema with its regions
checked against the board file (:meth:`~q25deploy.builddir.BuildDir.check_for`). Anything
else (an option of another command, an abbreviation, ``-h``, a value that starts with
``-``, ``status --svg``, a board file that does not load, a build that does not check out,
or any error at all) starts nothing: the command then reports what is wrong, in one line,
before any board is contacted.
"""

from __future__ import annotations

from collections.abc import Sequence

#: the long options every board command has: those that take a value, and those that do not
COMMON_VALUED = frozenset(
    {
        "--target",
        "--target-file",
        "--host",
        "--hosts-file",
        "--build",
        "--identity",
        "--known-hosts",
        "--remote-root",
        "--become",
        "--runtime-bin",
        "--jobs",
    }
)
COMMON_FLAGS = frozenset({"--trust-new-host", "--json", "--quiet"})
#: the commands that log in to boards → (their long options with a value, their flags)
OPTIONS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "deploy": (
        COMMON_VALUED | {"--transfer", "--forward"},
        COMMON_FLAGS | {"--tokenizer-only", "--strict", "--allow-unreserved", "--verify-board"},
    ),
    "smoke": (COMMON_VALUED | {"--forward"}, COMMON_FLAGS | {"--strict", "--quick"}),
    "status": (COMMON_VALUED | {"--svg"}, COMMON_FLAGS),
    "rollback": (COMMON_VALUED, COMMON_FLAGS),
}
COMMANDS = frozenset(OPTIONS)
DEFAULT_JOBS = 4  # --jobs' default (cli/deploy.py)
TRANSFERS = ("auto", "openssh", "paramiko")  # --transfer's choices


def scan(argv: Sequence[str]) -> dict | None:
    """The options of a board command as argparse would read them ({option: value}, ``--host``
    a list), or None where this cannot be sure of that."""
    if not argv or argv[0] not in COMMANDS:
        return None
    valued, flags = OPTIONS[argv[0]]
    opts: dict = {"--host": []}
    words = iter(argv[1:])
    for word in words:
        name, eq, value = word.partition("=")
        if name in flags and not eq:
            opts[name] = True
            continue
        if name not in valued:
            return None  # a positional, an abbreviation, -h, --: argparse's to read
        if not eq:
            following = next(words, None)
            if following is None or following.startswith("-"):
                return None
            value = following
        if name == "--host":
            opts["--host"].append(value)
        else:
            opts[name] = value
    return opts


def begin_logins(argv: Sequence[str]) -> dict:
    """Logins (host name → :class:`~q25deploy.deploy.sshboard.PendingLogin`) to the first
    ``--jobs`` boards of a board command; empty where :func:`scan` is not sure, or a check
    the command makes before it contacts a board would fail (it then says why, in one line)."""
    opts = scan(argv)
    if opts is None or "--svg" in opts or opts.get("--transfer", "auto") not in TRANSFERS:
        return {}
    try:
        return _begin(argv[0], opts)
    except Exception:  # whatever it is, the command meets it again and reports it before any login
        return {}


def _begin(command: str, opts: dict) -> dict:
    jobs = int(opts.get("--jobs", DEFAULT_JOBS))
    board = _board(opts)
    if jobs < 1 or board is None:
        return {}
    from ..deploy.become import prefix as become_prefix
    from ..deploy.options import Options, host_list
    from ..deploy.sshboard import begin_logins

    if "--become" in opts:
        become_prefix(opts["--become"])
    build = opts.get("--build") or (f"q25-build/{opts.get('--target') or board.name}" if command == "deploy" else None)
    if build is not None:
        from pathlib import Path

        from ..builddir import BuildDir

        BuildDir(Path(build)).check_for(board)  # a build that does not check out: no login
    wanted = Options(
        hosts=opts["--host"],
        hosts_file=opts.get("--hosts-file"),
        build_dir=None,
        identity=opts.get("--identity"),
        known_hosts=opts.get("--known-hosts"),
        trust_new_host="--trust-new-host" in opts,
        remote_root="",
        runtime_bin=None,
        jobs=jobs,
        transfer=opts.get("--transfer", "auto"),
    )
    specs = host_list(wanted, board.ssh_user, board.ssh_port)[:jobs]
    return begin_logins(specs, wanted, {})


def _board(opts: dict):
    """The board file ``--target-file`` names, else the built-in ``--target``'s (a plugin may
    provide another board file for that name: the command checks the logins against the target
    it resolves), else None."""
    from ..board.boardfile import load_board
    from ..resources import data_dir

    if "--target-file" in opts:
        return load_board(opts["--target-file"])
    if "--target" in opts:
        path = data_dir("targets") / f"{opts['--target']}.toml"
        return load_board(path) if path.is_file() else None
    return None
