"""Issue 11, defect 6: a login that is not root (PetaLinux 2022.1+ images can refuse root over
SSH). On the emulated board ``q25`` gains root with Debian's real sudo or doas and no
password; ``q25pw`` has rules that want a password, ``nobody2`` none at all
(tests/emulated_board/users.py)."""

from __future__ import annotations

import pytest
from board_checks import INSTALL, fresh, q25, resident
from emulated_board import DEPLOY_USER

from q25deploy.resources import data_dir


def owners(board, path: str) -> set[str]:
    """The owners of everything under ``path`` on the board."""
    return set(board.sh(f"find {path} -exec stat -c %U {{}} +")[1].split())


def test_a_user_with_sudo_deploys_smokes_and_rolls_back(board, builds, build_b, q25tok_aarch64, capsys, tmp_path):
    fresh(board)
    a, rt = builds["qemu"], str(q25tok_aarch64)
    user = board.login(DEPLOY_USER)
    assert user.sh("id -u")[1].strip() == "1000"
    # without --become the board refuses the first write (the lock under /lib/firmware): the
    # error says so and what to pass, in one line, and nothing was written
    code, res = q25(capsys, user.q25("deploy", a, "--runtime-bin", rt))
    error = res[0]["error"]
    assert code == 13 and "Permission denied" in error and "--become sudo" in error and "\n" not in error, error
    assert board.sh(f"test -e {INSTALL}", check=False)[0] != 0

    code, res = q25(capsys, user.q25("deploy", a, "--strict", "--runtime-bin", rt, "--become", "sudo"))
    assert code == 0 and res[0]["ok"] and res[0]["smoke"]["ok"], res[0]["error"]
    assert res[0]["residency"]["state"] == "resident" and resident(board, a, tmp_path)  # /dev/mem as root
    release_a = res[0]["release"]
    assert owners(board, INSTALL) == {"root"}  # written as root, as the image's own files are
    code, res = q25(
        capsys,
        user.q25("deploy", build_b, "--strict", "--runtime-bin", rt, "--become", "sudo", "--transfer", "openssh"),
    )  # sudo in front of q25tok receive, from ssh
    assert code == 0 and res[0]["previous"] == release_a and resident(board, build_b, tmp_path), res[0]["error"]
    code, res = q25(capsys, user.q25("rollback", build_b, "--become", "sudo"))
    assert code == 0 and res[0]["release"] == release_a
    assert board.sh(f"readlink {INSTALL}/current")[1].strip() == f"releases/{release_a}"
    assert resident(board, a, tmp_path)
    code, res = q25(capsys, user.q25("smoke", a, "--strict", "--become", "sudo"))
    assert code == 0 and res[0]["smoke"]["ok"], res[0]["error"]
    assert board.sh(f"test -L {INSTALL}/.q25deploy.lock", check=False)[0] != 0  # the lock went with the connection


def test_the_board_file_says_doas_and_the_command_line_overrides_it(board, builds, q25tok_aarch64, capsys, tmp_path):
    """``[ssh] become = "doas"`` with ``user = "q25"`` in the board file: no --become, no user
    in --host; ``--become none`` on the command line wins over the file."""
    fresh(board)
    target = tmp_path / "qemu-doas.toml"
    target.write_text(
        (data_dir("targets") / "qemu.toml")
        .read_text()
        .replace('user = "root"', f'user = "{DEPLOY_USER}"\nbecome = "doas"')
    )
    argv = [x if x != board.host else f"127.0.0.1:{board.port}" for x in board.q25("deploy", builds["qemu"])]
    argv += ["--target-file", str(target), "--runtime-bin", str(q25tok_aarch64)]
    code, res = q25(capsys, argv)
    assert code == 0 and res[0]["ok"] and res[0]["host"].startswith(f"{DEPLOY_USER}@"), res[0]["error"]
    assert res[0]["residency"]["state"] == "resident"
    status = [x if x != "deploy" else "status" for x in argv[:-2]]
    code, res = q25(capsys, status)
    assert code == 0 and res[0]["consistent"] and res[0]["residency"] == "resident"
    smoke = [x if x != "status" else "smoke" for x in status]
    code, res = q25(capsys, [*smoke, "--become", "none"])  # q25 itself may not read /dev/mem
    assert code == 13 and "Permission denied" in res[0]["error"] and "--become sudo" in res[0]["error"], res[0]


@pytest.mark.parametrize(
    "user, method, says, fix",
    [
        ("q25pw", "sudo", "a password is required", "'q25pw ALL=(root) NOPASSWD: ALL' to /etc/sudoers.d/"),
        ("nobody2", "sudo", "a password is required", "'nobody2 ALL=(root) NOPASSWD: ALL' to /etc/sudoers.d/"),
        ("q25pw", "doas", "Authentication required", "'permit nopass q25pw as root' to /etc/doas.conf"),
        ("nobody2", "doas", "Operation not permitted", "'permit nopass nobody2 as root' to /etc/doas.conf"),
    ],
)
def test_a_board_that_wants_a_password_is_refused_in_one_line(board, builds, capsys, user, method, says, fix):
    """sudo -n / doas -n: never a password prompt that nothing answers; the table's row says
    what the board said and what to configure there, and nothing is touched."""
    fresh(board)
    argv = [x for x in board.login(user).q25("deploy", builds["qemu"], "--become", method) if x != "--json"]
    code, table = q25(capsys, argv)
    (row,) = [ln for ln in table.splitlines() if ln.startswith(f"{user}@")]
    assert code == 13 and says in row and fix in row, table
    assert board.sh(f"test -e {INSTALL}", check=False)[0] != 0
