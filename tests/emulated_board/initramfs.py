"""The emulated board's initramfs: a newc cpio (written here, no ``cpio`` tool needed) with
BusyBox, the virtio modules (insmod'ed by ``/init`` in dependency order), the SSH server
(dropbear or OpenSSH), its libraries, a fixed host key and the authorized keys."""

from __future__ import annotations

import hashlib
import os
import stat
import struct
from dataclasses import dataclass, field
from pathlib import Path

from .elf import library_closure, modules_in_order
from .packages import FLAVOURS, BoardError
from .users import add_users

GLIBC = ("libm.so.6",)  # glibc's own, beside libc.so.6 on every glibc image

GUEST_IP, GUEST_GW = "10.0.2.15/24", "10.0.2.2"  # QEMU user network
HOST_KEY_SEED = hashlib.sha256(b"q25deploy emulated board host key").digest()  # fixed: stable known_hosts


# -- keys ---------------------------------------------------------------------------------


def host_key(seed: bytes = HOST_KEY_SEED):
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    return Ed25519PrivateKey.from_private_bytes(seed)


def host_key_files(seed: bytes = HOST_KEY_SEED) -> dict[str, bytes]:
    """The fixed host key in OpenSSH's and dropbear's formats, and its public line."""
    from cryptography.hazmat.primitives import serialization as s

    key = host_key(seed)
    pub = key.public_key().public_bytes(s.Encoding.Raw, s.PublicFormat.Raw)

    def string(b: bytes) -> bytes:
        return struct.pack(">I", len(b)) + b

    # dropbear (buf_put_ed25519_priv_key): string "ssh-ed25519", uint32 64, seed(32), pub(32)
    dropbear = string(b"ssh-ed25519") + struct.pack(">I", 64) + seed + pub
    openssh = key.private_bytes(s.Encoding.PEM, s.PrivateFormat.OpenSSH, s.NoEncryption())
    public = key.public_key().public_bytes(s.Encoding.OpenSSH, s.PublicFormat.OpenSSH)
    return {"dropbear": dropbear, "openssh": openssh, "public": public}


def known_hosts_line(port: int, seed: bytes = HOST_KEY_SEED) -> str:
    return f"[127.0.0.1]:{port} {host_key_files(seed)['public'].decode()}"


# -- initramfs ----------------------------------------------------------------------------


class Cpio:
    """A newc ("070701") archive, as the kernel unpacks an initramfs."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.ino = 1
        self.names: set[str] = set()

    def _entry(self, name: str, mode: int, data: bytes = b"", nlink: int = 1, owner=(0, 0)) -> None:
        name = name.strip("/")
        if name in self.names:
            return
        self.names.add(name)
        raw = name.encode() + b"\0"
        head = b"070701" + b"".join(
            f"{v:08x}".encode() for v in (self.ino, mode, *owner, nlink, 0, len(data), 0, 0, 0, 0, len(raw), 0)
        )
        self.ino += 1
        self.parts += [head, raw, b"\0" * (-(110 + len(raw)) % 4), data, b"\0" * (-len(data) % 4)]

    def dir(self, name: str, mode: int = 0o755, owner=(0, 0)) -> None:
        """A directory (``owner``: uid, gid) and its missing parents (root's, 0755)."""
        self._parent(name)
        self._entry(name, stat.S_IFDIR | mode, nlink=2, owner=owner)

    def _parent(self, name: str) -> None:
        parent = os.path.dirname(name.strip("/"))
        if parent:
            self.dir(parent)

    def file(self, name: str, data: bytes, mode: int = 0o644, owner=(0, 0)) -> None:
        self._parent(name)
        self._entry(name, stat.S_IFREG | mode, data, owner=owner)

    def symlink(self, name: str, target: str) -> None:
        self._parent(name)
        self._entry(name, stat.S_IFLNK | 0o777, target.encode())

    def copy(self, root: Path, rel: str, dest: str | None = None, mode: int | None = None) -> None:
        """A file from the extracted packages (its mode, or ``mode``); a symlink is copied with its target."""
        src = root / rel
        dest = dest or rel
        if src.is_symlink():
            target = os.readlink(src)
            self.symlink(dest, target)
            resolved = (
                os.path.normpath(os.path.join(os.path.dirname(rel), target))
                if not target.startswith("/")
                else target.lstrip("/")
            )
            self.copy(root, resolved, mode=mode)
        else:
            self.file(dest, src.read_bytes(), src.stat().st_mode & 0o7777 if mode is None else mode)

    def bytes(self) -> bytes:
        trailer = Cpio()
        trailer.ino = 0
        trailer._entry("TRAILER!!!", 0)
        return b"".join(self.parts + trailer.parts)


INIT = r"""#!/bin/sh
# q25deploy emulated board: BusyBox userland, virtio devices, SSH on QEMU's user network
/bin/busybox mkdir -p /proc /sys /dev /tmp /run /var/log /root
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sysfs /sys
/bin/busybox mount -t devtmpfs devtmpfs /dev
/bin/busybox --install -s
mkdir -p /dev/pts && mount -t devpts devpts /dev/pts
mount -t tmpfs -o mode=0755 tmpfs /run
for m in $(cat /etc/modules.order); do insmod "/lib/modules/$m" || echo "init: insmod $m failed"; done
hostname q25-board
ip link set lo up
ip addr add @GUEST_IP@ dev eth0 && ip link set eth0 up && ip route add default via @GUEST_GW@
if [ -e /dev/vda ]; then
    mkdir -p @DISK_MOUNT@ && mount -t ext4 /dev/vda @DISK_MOUNT@ && echo "init: /dev/vda on @DISK_MOUNT@"
fi
echo "init: up"
exec /sbin/init
"""

RCS = """#!/bin/sh
# the boot services (S* scripts, as the layer's sysvinit scripts are installed)
for s in /etc/init.d/S*; do [ -x "$s" ] && "$s" start; done
exit 0
"""

INITTAB = """::sysinit:/etc/init.d/rcS
::respawn:@SSH_SERVER@
::ctrlaltdel:/sbin/reboot
::shutdown:/bin/sync
::shutdown:/bin/umount -a -r
"""

SSHD_CONFIG = """Port 22
HostKey /etc/ssh/ssh_host_ed25519_key
PermitRootLogin prohibit-password
AuthorizedKeysFile .ssh/authorized_keys
StrictModes yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
PidFile /run/sshd.pid
Subsystem sftp internal-sftp
MaxSessions 64
MaxStartups 64
"""


@dataclass
class InitramfsSpec:
    flavour: str  # "dropbear" or "openssh"
    authorized_keys: str  # OpenSSH public key lines for every user (root and the others, see users.py)
    disk_mount: str = "/lib/firmware/q25"  # where a virtio disk, if any, is mounted
    dropbear_args: tuple[str, ...] = ()  # e.g. ("-W", "1048576"): a bigger receive window
    extra_files: dict[str, bytes] = field(default_factory=dict)  # path -> content (0755 under bin/ and init.d/)
    preload: dict[str, bytes] = field(default_factory=dict)  # the /dev/mem guard's files (guard.guard_files)
    trees: tuple[Path, ...] = ()  # directories laid over the root as they are (modes, links): unpacked packages


def _system(c: Cpio, root: Path, spec: InitramfsSpec) -> None:
    """BusyBox, the kernel modules, /init and the files of /etc every board has."""
    for d in ("bin", "sbin", "usr/bin", "usr/sbin", "etc", "proc", "sys", "dev", "run", "var/log", "lib/modules"):
        c.dir(d)
    c.dir("tmp", 0o1777)
    c.copy(root, "bin/busybox")
    c.symlink("bin/sh", "busybox")
    c.symlink("sbin/init", "../bin/busybox")
    mods = modules_in_order(root)
    for ko in mods:
        c.file(f"lib/modules/{ko.name}", ko.read_bytes())
    c.file("etc/modules.order", "".join(f"{ko.name}\n" for ko in mods).encode())
    init = INIT.replace("@GUEST_IP@", GUEST_IP).replace("@GUEST_GW@", GUEST_GW).replace("@DISK_MOUNT@", spec.disk_mount)
    c.file("init", init.encode(), 0o755)
    c.file("etc/shells", b"/bin/sh\n")
    c.file("etc/hostname", b"q25-board\n")
    c.file("etc/nsswitch.conf", b"passwd: files\ngroup: files\nshadow: files\nhosts: files\n")
    c.file("etc/hosts", b"127.0.0.1 localhost q25-board\n")
    c.file("etc/init.d/rcS", RCS.encode(), 0o755)


def _ssh_server(c: Cpio, spec: InitramfsSpec) -> tuple[str, str]:
    """The server's host key and configuration; returns (its binary, its inittab command)."""
    keys = host_key_files()
    if spec.flavour == "dropbear":
        c.file("etc/dropbear/dropbear_ed25519_host_key", keys["dropbear"], 0o600)
        return "usr/sbin/dropbear", " ".join(
            [
                "/usr/sbin/dropbear",
                "-F",
                "-E",
                "-s",
                "-p",
                "22",
                "-r",
                "/etc/dropbear/dropbear_ed25519_host_key",
                *spec.dropbear_args,
            ]
        )
    c.file("etc/ssh/ssh_host_ed25519_key", keys["openssh"], 0o600)
    c.file("etc/ssh/sshd_config", SSHD_CONFIG.encode())
    c.dir("run/sshd", 0o755)
    c.dir("var/empty", 0o755)
    # /init mounts a tmpfs on /run: sshd's privilege-separation directory is made there by
    # the server line (busybox init runs it through sh)
    return "usr/sbin/sshd", "/bin/sh -c 'mkdir -p /run/sshd && exec /usr/sbin/sshd -D -e -f /etc/ssh/sshd_config'"


def add_tree(c: Cpio, tree: Path) -> None:
    """Every directory, file and symlink under ``tree`` at the same path in the archive, with
    its mode (what ``dpkg-deb -x`` unpacked: a package's payload as an image installs it)."""
    for p in sorted(tree.rglob("*")):
        rel = p.relative_to(tree).as_posix()
        if p.is_symlink():
            c.symlink(rel, os.readlink(p))
        elif p.is_dir():
            c.dir(rel, p.stat().st_mode & 0o7777)
        else:
            c.file(rel, p.read_bytes(), p.stat().st_mode & 0o7777)


def assemble_initramfs(root: Path, out: Path, spec: InitramfsSpec) -> Path:
    """Write the board's initramfs (an uncompressed newc cpio: QEMU and the kernel take it
    as is) to ``out``."""
    if spec.flavour not in FLAVOURS:
        raise BoardError(f"unknown board flavour {spec.flavour!r} (known: {', '.join(FLAVOURS)})")
    c = Cpio()
    _system(c, root, spec)
    binary, server = _ssh_server(c, spec)
    c.copy(root, binary)
    binaries = [binary, *add_users(c, root, spec.authorized_keys)]
    c.copy(root, "lib/ld-linux-aarch64.so.1")
    # glibc's libraries every glibc image has whoever links them: a q25tok sent with --runtime-bin
    # needs libm (its forward pass) though no program of the board does
    for lib in library_closure(root, binaries, also=GLIBC):
        c.copy(root, lib)
    c.file("etc/inittab", INITTAB.replace("@SSH_SERVER@", server).encode())
    for tree in spec.trees:
        add_tree(c, tree)
    for path, data in {**spec.preload, **spec.extra_files}.items():
        c.file(path, data, 0o755 if "/bin/" in f"/{path}" or "/init.d/" in f"/{path}" else 0o644)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_bytes(c.bytes())
    tmp.rename(out)
    return out
