"""The emulated board's logins: root, and users who are not root, as on PetaLinux 2022.1+
images that refuse root over SSH: the deploy user gains root with Debian's real ``sudo``
(setuid root, its ``sudoers.so`` plugin, PAM) or OpenDoas' ``doas``.

- ``q25`` (uid 1000): ``NOPASSWD`` in sudoers.d, ``permit nopass`` in doas.conf — what
  ``q25deploy --become sudo|doas`` needs;
- ``q25pw`` (1001): rules that want a password (``sudo -n``/``doas -n`` refuse);
- ``nobody2`` (1002): no rule at all.

Every user logs in with the same client key from ``~/.ssh/authorized_keys`` (home 0700, .ssh
0700, the file 0600, all owned by the user: dropbear and OpenSSH both check). Nobody has a
password, so PAM permits (``pam_permit``; doas needs ``auth`` for ``pam_setcred``): ``sudo -n``
and ``doas -n`` refuse a rule that wants a password before PAM is asked.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

PAM_DIR = "lib/aarch64-linux-gnu/security"  # libpam0g's compiled-in module directory (Debian bookworm)


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    rule: str  # "nopass": root without a password; "password": a rule that wants one; "none"

    @property
    def home(self) -> str:
        return "root" if self.uid == 0 else f"home/{self.name}"


USERS = (
    User("root", 0, "none"),
    User("q25", 1000, "nopass"),
    User("q25pw", 1001, "password"),
    User("nobody2", 1002, "none"),
)
DEPLOY_USER = "q25"

SUDOERS = """Defaults env_reset
Defaults secure_path="/usr/sbin:/usr/bin:/sbin:/bin"
Defaults !lecture
root ALL=(ALL:ALL) ALL
@includedir /etc/sudoers.d
"""
PAM = """auth     required pam_permit.so
account  required pam_permit.so
session  required pam_permit.so
password required pam_deny.so
"""


def _accounts() -> dict[str, bytes]:
    """/etc/passwd, group, shadow: the users and sshd's privilege-separation user."""
    passwd = [f"{u.name}:x:{u.uid}:{u.uid}:{u.name}:/{u.home}:/bin/sh" for u in USERS]
    passwd.append("sshd:x:100:65534:sshd:/run/sshd:/bin/false")
    group = [f"{u.name}:x:{u.uid}:" for u in USERS] + ["nogroup:x:65534:"]
    shadow = [f"{name}:*:19000:0:99999:7:::" for name in [u.name for u in USERS] + ["sshd"]]
    return {
        n: ("\n".join(lines) + "\n").encode() for n, lines in (("passwd", passwd), ("group", group), ("shadow", shadow))
    }


def _rules() -> dict[str, bytes]:
    """sudoers.d and doas.conf lines for each user's rule."""
    sudo, doas = [], []
    for u in USERS:
        if u.rule == "nopass":
            sudo.append(f"{u.name} ALL=(root) NOPASSWD: ALL")
            doas.append(f"permit nopass {u.name} as root")
        elif u.rule == "password":
            sudo.append(f"{u.name} ALL=(root) ALL")
            doas.append(f"permit {u.name} as root")
    return {"sudoers.d": ("\n".join(sudo) + "\n").encode(), "doas.conf": ("\n".join(doas) + "\n").encode()}


def add_users(c, root: Path, authorized_keys: str) -> list[str]:
    """Put the users, their keys, sudo, doas and PAM into the cpio ``c``; returns what the
    dynamic loader must find libraries for (the caller adds their closure; packages.USER_PACKAGES
    has them)."""
    acc = _accounts()
    c.file("etc/passwd", acc["passwd"])
    c.file("etc/group", acc["group"])
    c.file("etc/shadow", acc["shadow"], 0o600)
    c.dir("home")
    for u in USERS:
        owner = (u.uid, u.uid)
        c.dir(u.home, 0o700, owner=owner)
        c.dir(f"{u.home}/.ssh", 0o700, owner=owner)
        c.file(f"{u.home}/.ssh/authorized_keys", authorized_keys.encode(), 0o600, owner=owner)
    rules = _rules()
    c.file("etc/sudoers", SUDOERS.encode(), 0o440)
    c.dir("etc/sudoers.d", 0o750)
    c.file("etc/sudoers.d/q25deploy", rules["sudoers.d"], 0o440)
    c.file("etc/doas.conf", rules["doas.conf"], 0o400)
    for service in ("sudo", "doas"):
        c.file(f"etc/pam.d/{service}", PAM.encode())
    # setuid root whatever the extraction kept (dpkg-deb -x as a user drops the bit)
    c.copy(root, "usr/bin/sudo", mode=0o4755)
    c.copy(root, "usr/bin/doas", mode=0o4755)
    plugins = ["usr/libexec/sudo/sudoers.so", f"{PAM_DIR}/pam_permit.so", f"{PAM_DIR}/pam_deny.so"]
    for p in plugins:
        c.copy(root, p)
    return ["usr/bin/sudo", "usr/bin/doas", *plugins]
