"""A Yocto image's deploy directory (``tmp/deploy/images/qemuarm64``) as something to boot: its
``*.qemuboot.conf`` (written by OE-core's ``qemuboot`` class, read by ``runqemu``; an INI file
with one ``[config_bsp]`` section of lower-cased ``QB_*`` and image variables) names the kernel
(``qb_default_kernel``), the root filesystem (``image_link_name`` + ``qb_default_fstype``) and
the kernel arguments (``qb_kernel_cmdline_append``, ``qb_kernel_root``,
``qb_cmdline_ip_slirp``)."""

from __future__ import annotations

import configparser
from dataclasses import dataclass
from pathlib import Path

from q25deploy.errors import SchemaError, UsageError

SECTION = "config_bsp"
DISK_FSTYPES = ("ext4", "ext3", "ext2", "btrfs")  # a virtio disk holding the root filesystem
INITRD_FSTYPES = ("cpio.gz", "cpio")  # an initramfs


@dataclass(frozen=True)
class YoctoImage:
    conf: Path
    kernel: Path
    rootfs: Path
    fstype: str
    cmdline: str  # kernel arguments beyond console and panic (ip=, root=, the image's own)
    virtio: str  # "pci" when the machine's qemuboot settings use virtio-*-pci devices

    @property
    def initrd(self) -> bool:
        return self.fstype in INITRD_FSTYPES


def find_qemuboot(path: Path) -> Path:
    """The ``.qemuboot.conf`` of a deploy directory (or the file itself). Links to the same
    file count once; several images in one directory: give the file."""
    if path.is_file():
        return path
    if not path.is_dir():
        raise UsageError(f"--yocto-deploy {path}: no such directory")
    confs: dict[Path, Path] = {}
    for conf in sorted(path.glob("*.qemuboot.conf"), key=lambda p: (p.is_symlink() is False, p.name)):
        confs.setdefault(conf.resolve(), conf)  # the link name (image_link_name) first
    if not confs:
        raise UsageError(f'--yocto-deploy {path}: no *.qemuboot.conf (build an image with IMAGE_CLASSES += "qemuboot")')
    if len(confs) > 1:
        names = ", ".join(sorted(p.name for p in confs.values()))
        raise UsageError(f"--yocto-deploy {path}: several images ({names}): give the .qemuboot.conf of one")
    return next(iter(confs.values()))


def read_qemuboot(text: str, where: str) -> dict[str, str]:
    """The ``[config_bsp]`` settings (keys lower-case, values as written)."""
    cf = configparser.ConfigParser(interpolation=None)
    try:
        cf.read_string(text, source=where)
    except configparser.Error as e:
        raise SchemaError(f"{where}: not a qemuboot.conf ({' '.join(str(e).split())})") from None
    if not cf.has_section(SECTION):
        raise SchemaError(f"{where}: not a qemuboot.conf (no [{SECTION}] section)")
    return {k.lower(): v.strip() for k, v in cf.items(SECTION)}


def _plain_name(value: str, key: str, where: str) -> str:
    name = Path(value).name  # runqemu looks the kernel up by its base name in the deploy directory
    if not name or name in (".", "..") or any(c in name for c in "\0\n"):
        raise SchemaError(f"{where}: {key} {value!r} is not a file name")
    return name


def image_from_settings(qb: dict[str, str], deploy: Path, where: str) -> YoctoImage:
    """What to boot, from the settings of a deploy directory's qemuboot.conf (pure but for
    looking files up in ``deploy``)."""
    fstype = qb.get("qb_default_fstype") or "ext4"
    if fstype not in DISK_FSTYPES + INITRD_FSTYPES:
        raise UsageError(
            f"{where}: root filesystem type {fstype!r} is not one qemu up boots "
            f"({', '.join(DISK_FSTYPES + INITRD_FSTYPES)})"
        )
    kernel_names = [_plain_name(qb[k], k, where) for k in ("qb_default_kernel", "kernel_imagetype") if qb.get(k)]
    kernel = next((deploy / n for n in kernel_names if (deploy / n).is_file()), None)
    if kernel is None:
        raise UsageError(f"{where}: no kernel ({' or '.join(kernel_names) or 'qb_default_kernel unset'}) in {deploy}")
    rootfs = None
    for key in ("image_link_name", "image_name"):
        if qb.get(key):
            stem = _plain_name(qb[key], key, where)
            found = [deploy / f"{stem}.{fstype}", *sorted(deploy.glob(f"{stem}*.{fstype}"))]
            rootfs = next((p for p in found if p.is_file()), rootfs)
            if rootfs is not None:
                break
    if rootfs is None:
        raise UsageError(
            f"{where}: no {fstype} root filesystem of image {qb.get('image_link_name', '?')!r} in {deploy}"
        )
    args = [qb.get("qb_kernel_cmdline_append", ""), qb.get("qb_cmdline_ip_slirp") or "ip=dhcp"]
    if fstype in DISK_FSTYPES:
        root = qb.get("qb_kernel_root") or "/dev/vda"
        args.append(f"root={root}" + ("" if {"ro", "rw"} & set(root.split()) else " rw"))
    cmdline = " ".join(" ".join(args).split())
    if not cmdline.isprintable():
        raise SchemaError(f"{where}: the kernel arguments are not printable text")
    pci = "-pci" in qb.get("qb_network_device", "") + qb.get("qb_rootfs_opt", "")
    return YoctoImage(Path(where), kernel, rootfs, fstype, cmdline, "pci" if pci else "mmio")


def yocto_image(path: Path) -> YoctoImage:
    """The kernel, root filesystem and kernel arguments of a Yocto deploy directory (or of one
    of its ``.qemuboot.conf`` files); files are looked up beside the conf file, as runqemu does
    when it is given one."""
    conf = find_qemuboot(Path(path))
    try:
        text = conf.read_text("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"{conf}: cannot read it ({e})") from None
    return image_from_settings(read_qemuboot(text, str(conf)), conf.resolve().parent, str(conf))
