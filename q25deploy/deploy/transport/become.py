"""Root for a login that is not root: ``sudo -n`` or ``doas -n`` in front of every command.

PetaLinux 2022.1+ images may refuse root over SSH; the deploy user then gains root with sudo
or doas for the install directory, ``/dev/mem`` (``q25tok load/verify``), the board lock
and ``sync`` (board file ``[ssh] become``, ``--become`` on the command line). ``-n``: the
board must never ask for a password (nothing would answer; a deploy would hang), so a rule
that wants one is refused here, at connect time, with what to configure on the board. Pure
text and one probe; :class:`~q25deploy.deploy.transport.connection.ParamikoSession` puts the prefix on commands.
"""

from __future__ import annotations

from ...board.boardfile import BECOME_METHODS
from ...errors import DeployError, UsageError

PREFIX = {"none": (), "sudo": ("sudo", "-n", "--"), "doas": ("doas", "-n", "--")}  # keys: BECOME_METHODS


def prefix(method: str) -> tuple[str, ...]:
    """The argv put in front of every remote command for ``method`` (none, sudo, doas)."""
    try:
        return PREFIX[method]
    except KeyError:
        raise UsageError(f"--become {method!r}: use one of {', '.join(BECOME_METHODS)}") from None


def rule(method: str, user: str) -> str:
    """What the board needs for ``user`` to gain root without a password."""
    if method == "doas":
        return f"'permit nopass {user} as root' to /etc/doas.conf"
    return f"'{user} ALL=(root) NOPASSWD: ALL' to /etc/sudoers.d/q25deploy (with visudo -f)"


def refusal(method: str, user: str, status: int, stderr: str) -> str:
    """Why ``<method> -n … true`` failed on the board, as one line that says what to configure."""
    lines = [ln.strip() for ln in stderr.strip().splitlines() if ln.strip()]
    said = lines[-1] if lines else f"exit status {status}"
    low = stderr.lower()
    if status == 127 or "not found" in low:
        return f"the board has no {method} ({said}): install it, or log in as root (--become none)"
    if "password is required" in low or "authentication required" in low:
        return f"{method} wants a password for {user} ({said}) and q25deploy never types one: add {rule(method, user)}"
    if "not in the sudoers" in low or "not allowed" in low or "may not run" in low or "not permitted" in low:
        return f"{user} may not gain root with {method} ({said}): add {rule(method, user)}"
    if "must have a tty" in low:
        return f"sudo wants a terminal ({said}): remove 'Defaults requiretty' for {user}"
    return f"{method} -n failed ({said}); the board needs {rule(method, user)}"


def check(board) -> None:
    """Refuse, in one line, a board where the login cannot gain root without a password (a
    ``true`` through the prefix); nothing to do for ``none``."""
    if board.become == "none":
        return
    status, _, err = board.run(["true"], check=False)
    if status != 0:
        why = refusal(board.become, board.spec.user, status, err.decode("utf-8", "replace"))
        raise DeployError(f"{board.spec.name}: {why}")


def hint(user: str, method: str, message: str) -> str:
    """`` — …`` for a board error message that is a permission problem of a login that is not
    root and does not use sudo/doas; "" otherwise."""
    if method != "none" or user == "root" or "permission denied" not in message.lower():
        return ""
    return (
        f" — {user} is not root: use --become sudo or doas (board file: [ssh] become), with a NOPASSWD rule for {user}"
    )
