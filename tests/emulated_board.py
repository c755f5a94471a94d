"""An emulated Cortex-A53 board: QEMU ``virt`` booting Debian's arm64 kernel with a BusyBox
initramfs and an SSH server (dropbear or OpenSSH), reachable on 127.0.0.1 only.

Built from Debian's arm64 packages without installing anything into the host
(``apt-get download`` + ``dpkg-deb -x`` into a cache directory):

- :func:`fetch_packages`  — download and extract the arm64 packages (cached across runs);
- :func:`assemble_initramfs` — a newc cpio (written here, no ``cpio`` tool needed) with
  BusyBox, the virtio modules (insmod'ed by ``/init`` in dependency order), the SSH server,
  its libraries, a fixed host key and an authorized key;
- :func:`make_disk` — an ext4 image for the install path (persistence across power cycles).

QEMU itself — the device tree (:func:`make_dtb`), :func:`boot`, :func:`wait_for_ssh`,
:meth:`QemuBoard.stop`, :func:`monitor`, :func:`read_physical` — is the qemu plugin's product
code (``q25deploy_plugins.qemu``, behind ``q25deploy qemu up|down``), re-exported here.

Nothing here talks to anything but apt (package downloads) and loopback.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import struct
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

# the board's QEMU: the qemu plugin's machinery (q25deploy qemu up|down uses the same)
from q25deploy_plugins.qemu.machine import Boot, Machine, make_dtb  # noqa: F401
from q25deploy_plugins.qemu.vm import QemuBoard, boot, free_port, monitor, read_physical, wait_for_ssh  # noqa: F401

ARCH = "arm64"
KERNEL_META = "linux-image-cloud-arm64"  # resolves to linux-image-6.1.0-N-cloud-arm64
BASE_PACKAGES = ("busybox-static", "libc6", "libcrypt1", "zlib1g")
FLAVOUR_PACKAGES = {
    "dropbear": ("dropbear-bin", "libtomcrypt1", "libtommath1", "libgmp10"),
    "openssh": ("openssh-server", "libwrap0", "libaudit1", "libcap-ng0", "libpam0g", "libsystemd0", "libcap2",
                "libgcrypt20", "libgpg-error0", "liblz4-1", "liblzma5", "libzstd1", "libselinux1", "libpcre2-8-0",
                "libgssapi-krb5-2", "libkrb5-3", "libk5crypto3", "libkrb5support0", "libkeyutils1", "libcom-err2",
                "libssl3", "libnsl2", "libtirpc3"),
}
FLAVOURS = tuple(FLAVOUR_PACKAGES)
# modules of the cloud kernel the board needs (their dependencies are found from .modinfo)
MODULES = ("virtio_mmio", "virtio_net", "virtio_blk", "virtio-rng")
LIB_DIRS = ("lib/aarch64-linux-gnu", "usr/lib/aarch64-linux-gnu", "lib", "usr/lib")
GUEST_IP, GUEST_GW = "10.0.2.15/24", "10.0.2.2"  # QEMU user network
HOST_KEY_SEED = hashlib.sha256(b"q25deploy emulated board host key").digest()  # fixed: stable known_hosts


class BoardError(RuntimeError):
    """The board could not be assembled or booted (the message says what and why)."""


def default_cache_dir() -> Path:
    """``$Q25_BOARD_CACHE``, else ``$XDG_CACHE_HOME/q25deploy/emulated-board`` (~/.cache)."""
    env = os.environ.get("Q25_BOARD_CACHE")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "q25deploy" / "emulated-board"


def _run(cmd: list[str], what: str, **kw) -> subprocess.CompletedProcess:
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    except FileNotFoundError:
        raise BoardError(f"{cmd[0]} not found (needed to {what})") from None
    if r.returncode != 0:
        raise BoardError(f"{what} failed: {' '.join(cmd[:4])}…: {(r.stderr or r.stdout).strip()[-400:]}")
    return r


# -- packages -----------------------------------------------------------------------------

def _resolve_kernel() -> str:
    out = _run(["apt-cache", "depends", "--no-recommends", "--no-suggests", f"{KERNEL_META}:{ARCH}"],
               f"resolve {KERNEL_META} (dpkg --add-architecture {ARCH} && apt-get update)").stdout
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("Depends:") and "linux-image-" in line:
            return line.split()[1].split(":")[0]
    raise BoardError(f"{KERNEL_META}:{ARCH} has no kernel dependency (is the {ARCH} architecture added?)")


def fetch_packages(cache: Path, flavours=FLAVOURS) -> Path:
    """Download (``apt-get download``) and extract (``dpkg-deb -x``) the arm64 packages of the
    board into ``cache``; returns the extracted root. A cache that holds them is used as is,
    without asking apt (the second run is offline)."""
    names = sorted({*BASE_PACKAGES, *(p for f in flavours for p in FLAVOUR_PACKAGES[f])})
    key = hashlib.sha256(json.dumps(names).encode()).hexdigest()[:12]
    cache.mkdir(parents=True, exist_ok=True)
    index = cache / f"packages-{key}.json"
    debs_dir = cache / "debs"
    if index.is_file():
        debs = json.loads(index.read_text())["debs"]
        root = cache / f"root-{hashlib.sha256(json.dumps(debs).encode()).hexdigest()[:12]}"
        if (root / ".complete").is_file():
            return root
    debs_dir.mkdir(exist_ok=True)
    wanted = [_resolve_kernel(), *names]
    before = set(os.listdir(debs_dir))
    _run(["apt-get", "download", "-q", *[f"{n}:{ARCH}" for n in wanted]],
         f"download the board's {ARCH} packages (dpkg --add-architecture {ARCH} && apt-get update)", cwd=debs_dir)
    debs = []
    for n in wanted:  # the newest file of each package (apt-get download names it name_version_arch.deb)
        cands = sorted((p for p in os.listdir(debs_dir) if p.startswith(f"{n}_") and p.endswith(f"_{ARCH}.deb")),
                       key=lambda p: (p not in before, os.path.getmtime(debs_dir / p)))
        if not cands:
            raise BoardError(f"apt-get download gave no {n}")
        debs.append(cands[-1])
    root = cache / f"root-{hashlib.sha256(json.dumps(debs).encode()).hexdigest()[:12]}"
    if not (root / ".complete").is_file():
        tmp = root.with_name(root.name + f".tmp{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        for d in debs:
            _run(["dpkg-deb", "-x", str(debs_dir / d), str(tmp)], f"extract {d}")
        (tmp / ".complete").write_text("\n".join(debs) + "\n")
        shutil.rmtree(root, ignore_errors=True)
        tmp.rename(root)
    index.write_text(json.dumps({"debs": debs}, indent=1))
    return root


def kernel_release(root: Path) -> str:
    rels = sorted(p.name for p in (root / "lib" / "modules").iterdir())
    if not rels:
        raise BoardError(f"{root}: no kernel modules")
    return rels[-1]


def kernel_image(root: Path) -> Path:
    return root / "boot" / f"vmlinuz-{kernel_release(root)}"


# -- ELF helpers (kernel modules' dependencies, shared libraries) --------------------------

def _elf_sections(data: bytes) -> dict[str, bytes]:
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise BoardError("not a little-endian ELF64 file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    heads = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    strtab = heads[shstrndx]
    names = data[strtab[4]:strtab[4] + strtab[5]]
    out = {}
    for name_off, typ, _flags, _addr, off, size in heads:
        name = names[name_off:names.index(b"\0", name_off)].decode()
        out[name] = data[off:off + size] if typ != 8 else b""  # SHT_NOBITS
    return out


def module_depends(ko: Path) -> list[str]:
    info = _elf_sections(ko.read_bytes()).get(".modinfo", b"")
    for item in info.split(b"\0"):
        if item.startswith(b"depends="):
            return [d for d in item[8:].decode().split(",") if d]
    return []


def modules_in_order(root: Path, wanted=MODULES) -> list[Path]:
    """The .ko files of ``wanted`` and everything they depend on, dependencies first."""
    base = root / "lib" / "modules" / kernel_release(root) / "kernel"
    by_name = {p.name[:-3].replace("-", "_"): p for p in base.rglob("*.ko")}
    order: list[Path] = []
    seen: set[str] = set()

    def visit(name: str) -> None:
        name = name.replace("-", "_")
        if name in seen:
            return
        seen.add(name)
        if name not in by_name:
            raise BoardError(f"kernel module {name} not found under {base}")
        for dep in module_depends(by_name[name]):
            visit(dep)
        order.append(by_name[name])

    for m in wanted:
        visit(m)
    return order


def _needed(path: Path) -> list[str]:
    data = path.read_bytes()
    secs = _elf_sections(data)
    dyn, dynstr = secs.get(".dynamic", b""), secs.get(".dynstr", b"")
    out = []
    for i in range(0, len(dyn) - 15, 16):
        tag, val = struct.unpack_from("<qQ", dyn, i)
        if tag == 0:
            break
        if tag == 1:  # DT_NEEDED
            out.append(dynstr[val:dynstr.index(b"\0", val)].decode())
    return out


def library_closure(root: Path, binaries: list[str]) -> list[str]:
    """Paths (relative to root) of the shared libraries the binaries need, transitively."""
    found: dict[str, str] = {}
    todo = list(binaries)
    while todo:
        rel = todo.pop()
        for lib in _needed(root / rel):
            if lib in found:
                continue
            for d in LIB_DIRS:
                if (root / d / lib).exists():
                    found[lib] = f"{d}/{lib}"
                    todo.append(found[lib])
                    break
            else:
                raise BoardError(f"{rel} needs {lib}, which none of the board's packages has")
    return sorted(found.values())


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

    def _entry(self, name: str, mode: int, data: bytes = b"", nlink: int = 1) -> None:
        name = name.strip("/")
        if name in self.names:
            return
        self.names.add(name)
        raw = name.encode() + b"\0"
        head = b"070701" + b"".join(f"{v:08x}".encode() for v in (
            self.ino, mode, 0, 0, nlink, 0, len(data), 0, 0, 0, 0, len(raw), 0))
        self.ino += 1
        self.parts += [head, raw, b"\0" * (-(110 + len(raw)) % 4), data, b"\0" * (-len(data) % 4)]

    def dir(self, name: str, mode: int = 0o755) -> None:
        parts = name.strip("/").split("/")
        for i in range(1, len(parts) + 1):
            self._entry("/".join(parts[:i]), stat.S_IFDIR | mode, nlink=2)

    def _parent(self, name: str) -> None:
        parent = os.path.dirname(name.strip("/"))
        if parent:
            self.dir(parent)

    def file(self, name: str, data: bytes, mode: int = 0o644) -> None:
        self._parent(name)
        self._entry(name, stat.S_IFREG | mode, data)

    def symlink(self, name: str, target: str) -> None:
        self._parent(name)
        self._entry(name, stat.S_IFLNK | 0o777, target.encode())

    def copy(self, root: Path, rel: str, dest: str | None = None) -> None:
        """A file from the extracted packages; a symlink is copied with its target."""
        src = root / rel
        dest = dest or rel
        if src.is_symlink():
            target = os.readlink(src)
            self.symlink(dest, target)
            resolved = os.path.normpath(os.path.join(os.path.dirname(rel), target)) if not target.startswith("/") \
                else target.lstrip("/")
            self.copy(root, resolved)
        else:
            self.file(dest, src.read_bytes(), src.stat().st_mode & 0o7777)

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
AuthorizedKeysFile /etc/ssh/authorized_keys
StrictModes no
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
    authorized_keys: str  # OpenSSH public key lines for root
    disk_mount: str = "/lib/firmware/q25"  # where a virtio disk, if any, is mounted
    dropbear_args: tuple[str, ...] = ()  # e.g. ("-W", "1048576"): a bigger receive window
    extra_files: dict[str, bytes] = field(default_factory=dict)  # path -> content (0755 under bin/ and init.d/)


def assemble_initramfs(root: Path, out: Path, spec: InitramfsSpec) -> Path:
    """Write the board's initramfs (an uncompressed newc cpio: QEMU and the kernel take it
    as is) to ``out``."""
    if spec.flavour not in FLAVOURS:
        raise BoardError(f"unknown board flavour {spec.flavour!r} (known: {', '.join(FLAVOURS)})")
    c = Cpio()
    for d in ("bin", "sbin", "usr/bin", "usr/sbin", "etc", "proc", "sys", "dev", "tmp", "run", "var/log",
              "lib/modules"):
        c.dir(d)
    c.dir("root", 0o700)
    c.dir("tmp", 0o1777)
    c.copy(root, "bin/busybox")
    c.symlink("bin/sh", "busybox")
    c.symlink("sbin/init", "../bin/busybox")
    mods = modules_in_order(root)
    for ko in mods:
        c.file(f"lib/modules/{ko.name}", ko.read_bytes())
    c.file("etc/modules.order", "".join(f"{ko.name}\n" for ko in mods).encode())
    init = (INIT.replace("@GUEST_IP@", GUEST_IP).replace("@GUEST_GW@", GUEST_GW)
            .replace("@DISK_MOUNT@", spec.disk_mount))
    c.file("init", init.encode(), 0o755)
    c.file("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\nsshd:x:100:65534:sshd:/run/sshd:/bin/false\n")
    c.file("etc/group", b"root:x:0:\nnogroup:x:65534:\n")
    c.file("etc/shadow", b"root:*:19000:0:99999:7:::\nsshd:*:19000:0:99999:7:::\n", 0o600)
    c.file("etc/shells", b"/bin/sh\n")
    c.file("etc/hostname", b"q25-board\n")
    c.file("etc/nsswitch.conf", b"passwd: files\ngroup: files\nshadow: files\nhosts: files\n")
    c.file("etc/hosts", b"127.0.0.1 localhost q25-board\n")
    keys = host_key_files()
    if spec.flavour == "dropbear":
        binaries = ["usr/sbin/dropbear"]
        c.file("etc/dropbear/dropbear_ed25519_host_key", keys["dropbear"], 0o600)
        c.dir("root/.ssh", 0o700)
        c.file("root/.ssh/authorized_keys", spec.authorized_keys.encode(), 0o600)
        server = " ".join(["/usr/sbin/dropbear", "-F", "-E", "-s", "-p", "22",
                           "-r", "/etc/dropbear/dropbear_ed25519_host_key", *spec.dropbear_args])
    else:
        binaries = ["usr/sbin/sshd"]
        c.file("etc/ssh/ssh_host_ed25519_key", keys["openssh"], 0o600)
        c.file("etc/ssh/authorized_keys", spec.authorized_keys.encode(), 0o644)
        c.file("etc/ssh/sshd_config", SSHD_CONFIG.encode())
        c.dir("run/sshd", 0o755)
        c.dir("var/empty", 0o755)
        server = "/usr/sbin/sshd -D -e -f /etc/ssh/sshd_config"
    for b in binaries:
        c.copy(root, b)
    c.copy(root, "lib/ld-linux-aarch64.so.1")
    for lib in library_closure(root, binaries):
        c.copy(root, lib)
    # /init mounts a tmpfs on /run: sshd's privilege-separation directory is made there by
    # the server line (busybox init runs it through sh)
    if spec.flavour == "openssh":
        server = f"/bin/sh -c 'mkdir -p /run/sshd && exec {server}'"
    c.file("etc/inittab", INITTAB.replace("@SSH_SERVER@", server).encode())
    c.file("etc/init.d/rcS", RCS.encode(), 0o755)
    for path, data in spec.extra_files.items():
        c.file(path, data, 0o755 if "/bin/" in f"/{path}" or "/init.d/" in f"/{path}" else 0o644)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_bytes(c.bytes())
    tmp.rename(out)
    return out


# -- disk ---------------------------------------------------------------------------------

def make_disk(path: Path, size_mib: int = 64) -> Path:
    """An empty ext4 image for the install path (persistence across reboots)."""
    with open(path, "wb") as f:
        f.truncate(size_mib << 20)
    _run(["mkfs.ext4", "-q", "-F", "-L", "q25", str(path)], "make the board's ext4 disk (e2fsprogs)")
    return path
