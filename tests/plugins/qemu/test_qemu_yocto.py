"""A Yocto deploy directory as `qemu up` reads it: its qemuboot.conf (the keys OE-core's
qemuboot class writes and runqemu reads) gives the kernel, root filesystem and kernel
arguments. Deploy directories are made on tmp_path the way a qemuarm64 build leaves them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from q25deploy.errors import SchemaError, UsageError
from q25deploy_plugins.qemu.yocto import find_qemuboot, read_qemuboot, yocto_image

STAMP = "20250101000000"
IMAGE = "core-image-minimal-qemuarm64.rootfs"
KERNEL = f"Image--6.6.23+git0+abc-r0-qemuarm64-{STAMP}.bin"


def qemuboot(**over: str) -> str:
    keys = {
        "deploy_dir_image": ".",
        "image_link_name": IMAGE,
        "image_name": f"{IMAGE}-{STAMP}",
        "kernel_imagetype": "Image",
        "machine": "qemuarm64",
        "qb_cmdline_ip_slirp": "ip=dhcp",
        "qb_default_fstype": "ext4",
        "qb_default_kernel": KERNEL,
        "qb_kernel_cmdline_append": "swiotlb=0",
        "qb_machine": "-machine virt",
        "qb_mem": "-m 256",
        "qb_network_device": "-device virtio-net-pci,netdev=net0,mac=@MAC@",
        "qb_rootfs_opt": "-drive id=disk0,file=@ROOTFS@,if=none,format=raw -device virtio-blk-pci,drive=disk0",
        "qb_system_name": "qemu-system-aarch64",
        **over,
    }
    return "[config_bsp]\n" + "".join(f"{k} = {v}\n" for k, v in keys.items() if v is not None) + "\n"


def deploy_dir(root: Path, conf: str | None = None, *, files=(KERNEL, f"{IMAGE}-{STAMP}.ext4")) -> Path:
    d = root / "tmp" / "deploy" / "images" / "qemuarm64"
    d.mkdir(parents=True)
    for name in files:
        (d / name).write_bytes(b"x")
    if f"{IMAGE}-{STAMP}.ext4" in files:
        (d / f"{IMAGE}.ext4").symlink_to(f"{IMAGE}-{STAMP}.ext4")
    (d / f"{IMAGE}-{STAMP}.qemuboot.conf").write_text(conf or qemuboot())
    (d / f"{IMAGE}.qemuboot.conf").symlink_to(f"{IMAGE}-{STAMP}.qemuboot.conf")
    return d


def test_an_ext4_image_boots_from_a_virtio_disk(tmp_path):
    d = deploy_dir(tmp_path)
    img = yocto_image(d)
    assert img.conf.name == f"{IMAGE}.qemuboot.conf"  # the link name of the one image (links count once)
    assert img.kernel == d / KERNEL and img.rootfs == d / f"{IMAGE}.ext4" and not img.initrd
    assert img.cmdline == "swiotlb=0 ip=dhcp root=/dev/vda rw"
    assert img.virtio == "pci"  # as the machine's qemuboot settings
    assert yocto_image(d / f"{IMAGE}-{STAMP}.qemuboot.conf").rootfs == d / f"{IMAGE}.ext4"


def test_an_initramfs_image_and_the_kernel_found_by_its_type(tmp_path):
    conf = qemuboot(
        qb_default_fstype="cpio.gz",
        qb_default_kernel="Image",
        qb_kernel_root="/dev/vda ro",
        qb_network_device="-device virtio-net-device,netdev=net0",
        qb_rootfs_opt=None,
    )
    d = deploy_dir(tmp_path, conf, files=("Image", f"{IMAGE}-{STAMP}.cpio.gz"))
    img = yocto_image(d)
    assert img.initrd and img.rootfs == d / f"{IMAGE}-{STAMP}.cpio.gz" and img.kernel == d / "Image"
    assert "root=" not in img.cmdline and img.virtio == "mmio"


def test_what_is_missing_or_unsupported_is_a_one_line_usage_error(tmp_path):
    with pytest.raises(UsageError, match="no such directory"):
        yocto_image(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="no \\*.qemuboot.conf"):
        yocto_image(tmp_path / "empty")
    d = deploy_dir(tmp_path / "nokernel", files=(f"{IMAGE}-{STAMP}.ext4",))
    with pytest.raises(UsageError, match=re.escape(f"no kernel ({KERNEL} or Image)")):
        yocto_image(d)
    d = deploy_dir(tmp_path / "wic", qemuboot(qb_default_fstype="wic"))
    with pytest.raises(UsageError, match="'wic' is not one qemu up boots"):
        yocto_image(d)
    d = deploy_dir(tmp_path / "norootfs", files=(KERNEL,))
    with pytest.raises(UsageError, match="no ext4 root filesystem"):
        yocto_image(d)
    d = deploy_dir(tmp_path / "two")
    (d / "core-image-base-qemuarm64.rootfs.qemuboot.conf").write_text(qemuboot())
    with pytest.raises(UsageError, match="several images"):
        find_qemuboot(d)


def test_a_conf_file_names_files_inside_the_deploy_directory_only(tmp_path):
    d = deploy_dir(tmp_path, qemuboot(qb_default_kernel=f"../../../../{KERNEL}"))
    assert yocto_image(d).kernel == d / KERNEL  # the base name, looked up beside the conf file
    with pytest.raises(SchemaError, match="not a qemuboot.conf"):
        read_qemuboot("qb_default_kernel = Image\n", "x.qemuboot.conf")
    with pytest.raises(SchemaError, match="no \\[config_bsp\\]"):
        read_qemuboot("[other]\nkey = value\n", "x.qemuboot.conf")
    d = deploy_dir(tmp_path / "bad", qemuboot(image_link_name="..", image_name=".."))
    with pytest.raises(SchemaError, match="is not a file name"):
        yocto_image(d)
