"""The handlers of ``q25deploy qemu up|down|status`` (parsed by :mod:`.cli`)."""

from __future__ import annotations

import argparse
import json
import os
import shlex
from dataclasses import dataclass
from pathlib import Path

from q25deploy.errors import BoardFileError, DeployError, UsageError

from . import vm
from .image import matching_identity, read_initramfs
from .machine import Boot, Files, Machine, dtb_files, kernel_cmdline, make_dtb, need_tool
from .state import STATE_FILE, State, read_state, remove_files, state_home, write_state
from .state import state_dir as state_dir_of

KNOWN_HOSTS = "known_hosts"  # the board's host key, recorded by the first deploy --trust-new-host
MAX_SOCKET_PATH = 107  # sun_path holds 108 bytes with the terminating NUL
RUNTIME_OUT = "q25-out/runtime-aarch64"  # where the printed `runtime build` puts a q25tok for the board


@dataclass(frozen=True)
class Payload:
    """What ``up`` boots: from --kernel/--initrd/--drive/--append or a Yocto deploy directory."""

    kernel: Path
    initrd: Path | None
    drives: tuple[Path, ...]
    cmdline: str
    virtio: str


def payload(a: argparse.Namespace) -> Payload:
    drives = tuple(Path(os.path.abspath(d)) for d in a.drive)
    if a.yocto_deploy is not None:
        if a.kernel or a.initrd:
            raise UsageError("give --yocto-deploy or --kernel/--initrd, not both")
        from .yocto import yocto_image

        img = yocto_image(a.yocto_deploy)
        disk = () if img.initrd else (img.rootfs,)
        return Payload(
            img.kernel.absolute(),
            img.rootfs.absolute() if img.initrd else None,
            (*disk, *drives),
            kernel_cmdline(initrd=True, drives=0, extra=f"{img.cmdline} {a.append}"),
            a.virtio or img.virtio,
        )
    if a.kernel is None:
        raise UsageError("give --kernel FILE (with --initrd FILE or --drive FILE) or --yocto-deploy DIR")
    for what, path in (("--kernel", a.kernel), ("--initrd", a.initrd), *(("--drive", d) for d in a.drive)):
        if path is not None and not path.is_file():
            raise UsageError(f"{what} {path}: no such file")
    initrd = Path(os.path.abspath(a.initrd)) if a.initrd else None
    if not a.append.isprintable():
        raise UsageError("--append: give one line of printable text")
    return Payload(
        Path(os.path.abspath(a.kernel)),
        initrd,
        drives,
        kernel_cmdline(initrd=initrd is not None, drives=len(drives), extra=a.append),
        a.virtio or "mmio",
    )


def build_fragment(build: Path, target: str) -> Path:
    """The build's ``reserved-memory.dtsi`` (a build for another board is refused)."""
    dtsi = build / "reserved-memory.dtsi"
    if not dtsi.is_file():
        raise UsageError(
            f"{build}: no reserved-memory.dtsi there (run q25deploy build --target {target}, or give --build)"
        )
    try:
        built_for = json.loads((build / "build.json").read_text()).get("target")
    except (OSError, ValueError, AttributeError):
        built_for = None
    if built_for and built_for != target:
        raise UsageError(f"{build} is a build for {built_for!r}, not {target!r}")
    return dtsi


def up(a: argparse.Namespace, context) -> int:
    target = context.resolve_target(a.target, a.target_file)
    if not target.board.qemu:
        raise BoardFileError(
            f"{target.board.source or target.name}: no [qemu] table: {target.name!r} is not an emulated board"
        )
    machine = Machine.from_board(target.board, smp=a.smp, qemu=a.qemu)
    need_tool(machine.qemu)
    need_tool("dtc")
    what = payload(a)
    dtsi = build_fragment(a.build or Path("q25-build") / target.name, target.name)
    port = a.ssh_port if a.ssh_port is not None else target.board.ssh_port
    state_dir = state_dir_of(a)
    files = Files.in_dir(state_dir)
    if len(os.fsencode(files.monitor)) > MAX_SOCKET_PATH:
        raise UsageError(f"{files.monitor}: too long for a unix socket: give a shorter --state-dir")
    made = _take_state_dir(state_dir)
    known_hosts = files.pidfile.with_name(KNOWN_HOSTS)
    written = [*dtb_files(state_dir / "board.dtb"), files.pidfile, files.serial_log, files.monitor, known_hosts]
    try:
        known_hosts.write_text("")  # for deploy --trust-new-host: a new board, a new host key
        dtb = make_dtb(state_dir / "board.dtb", machine, dtsi)
        board = vm.boot(
            state_dir, machine, Boot(what.kernel, what.initrd, what.drives, dtb, what.cmdline, port, what.virtio)
        )
    except BaseException:
        remove_files(state_dir, State(0, port, "", [], [p.name for p in written], made))
        raise
    state = State(board.pid, port, target.board.ssh_user, board.argv, [p.name for p in written] + [STATE_FILE], made)
    write_state(state_dir, state)
    result = describe(state_dir, state, running=True)
    result.update(
        target=target.name,
        kernel=str(what.kernel),
        initrd=str(what.initrd) if what.initrd else None,
        drives=[str(d) for d in what.drives],
        cmdline=what.cmdline,
        dtb=str(dtb),
    )
    result.update(image_needs(what.initrd, target.board.runtime_path, Path.home() / ".ssh"))
    if a.wait:
        result["ssh_seconds"] = round(vm.wait_for_ssh(board, a.timeout), 1)
        result["ssh"] = True
    return _emit(a, result, up_text(result, target.name, a.build))


def image_needs(initrd: Path | None, runtime_path: str, ssh_dir: Path) -> dict:
    """What a deploy to the booted image needs besides the build: ``has_runtime`` (True, False,
    or None when the image cannot be read: a disk, a compressed initramfs) and ``identity``,
    the private key in ``ssh_dir`` whose public key the image authorizes for root (or None)."""
    contents = read_initramfs(initrd) if initrd else None
    if contents is None:
        return {"has_runtime": None, "identity": None}
    key = matching_identity(contents.authorized_keys, ssh_dir)
    return {"has_runtime": contents.has(runtime_path), "identity": str(key) if key else None}


def _take_state_dir(state_dir: Path) -> bool:
    """Make sure nothing of ours runs from ``state_dir`` (stale files of a QEMU that ended are
    removed); returns whether the directory had to be made."""
    old = read_state(state_dir)
    if old is not None:
        if old.board(state_dir).alive():
            raise UsageError(
                f"a board already runs from {state_dir} (pid {old.pid}, SSH on 127.0.0.1:{old.port}): "
                f"q25deploy qemu down --state-dir {state_dir} first, or give another --state-dir"
            )
        remove_files(state_dir, State(old.pid, old.port, old.user, old.argv, old.files, False))
    made = not state_dir.exists()
    state_dir.mkdir(parents=True, exist_ok=True)
    return made


def describe(state_dir: Path, state: State, *, running: bool) -> dict:
    """What ``up``/``status``/``down`` report (paths as the state directory was given)."""
    files = Files.in_dir(state_dir)
    return {
        "state_dir": str(state_dir),
        "running": running,
        "pid": state.pid,
        "port": state.port,
        "host": f"{state.user}@127.0.0.1:{state.port}",
        "serial_log": str(state_dir / files.serial_log.name),
        "monitor": str(state_dir / files.monitor.name),
        "known_hosts": str(state_dir / KNOWN_HOSTS),
    }


def up_text(r: dict, target: str, build: Path | None) -> str:
    """What ``up`` says: where things are and the next commands, each runnable as printed on
    this image (``--runtime-bin`` when it has no q25tok, ``--identity`` when a key of yours is
    the one it authorizes)."""
    q = shlex.quote
    waited = f", SSH up after {r['ssh_seconds']} s" if "ssh_seconds" in r else " (booting: add --wait to wait for SSH)"
    opts = f"--target {q(target)} --host {r['host']}{f' --build {q(str(build))}' if build else ''}"
    opts += f" --known-hosts {q(r['known_hosts'])}"
    key = r.get("identity")
    opts += f" --identity {q(key)}" if key else ""
    is_default = Path(r["state_dir"]) == state_home() / target
    where = (f" --target {q(target)}" if target != "qemu" else "") + (
        "" if is_default else f" --state-dir {q(r['state_dir'])}"
    )
    user, port = r["host"].split("@")[0], r["port"]
    lines = [
        f"QEMU runs (pid {r['pid']}){waited}",
        f"  state       {r['state_dir']}",
        f"  serial log  {r['serial_log']}",
        f"  monitor     {r['monitor']} (HMP)",
        f"  ssh         ssh -p {port}{f' -i {q(key)}' if key else ''} -o UserKnownHostsFile={q(r['known_hosts'])} "
        f"{user}@127.0.0.1",
    ]
    runtime = ""
    if r.get("has_runtime") is False:  # the image has no q25tok: the release brings one
        bin_path = f"{RUNTIME_OUT}/q25tok"
        if not Path(bin_path).is_file():
            lines.append(f"  runtime     q25deploy runtime build --cross aarch64 --static --out {RUNTIME_OUT}")
        runtime = f" --runtime-bin {bin_path}"
    lines += [
        f"  deploy      q25deploy deploy {opts} --trust-new-host{runtime}",
        f"  smoke       q25deploy smoke {opts} --strict",
        f"  stop        q25deploy qemu down{where}",
    ]
    if r.get("has_runtime") is None:
        lines.append("  (whether the image has q25tok is not known: if it has none, deploy with --runtime-bin FILE)")
    return "\n".join(lines)


def down(a: argparse.Namespace, context) -> int:
    a.state_dir = state_dir_of(a)
    state = read_state(a.state_dir)
    if state is None:
        return _emit(
            a,
            {"state_dir": str(a.state_dir), "running": False, "stopped": None, "removed": []},
            f"no board recorded in {a.state_dir}: nothing to stop",
        )
    board = state.board(a.state_dir)
    how = board.stop(a.timeout)
    if vm.is_our_qemu(state.pid, board.files.pidfile, state.argv):
        raise DeployError(f"QEMU (pid {state.pid}) did not stop, not even on SIGKILL")
    removed = remove_files(a.state_dir, state)
    result = {**describe(a.state_dir, state, running=False), "stopped": how, "removed": removed}
    text = (
        f"stopped QEMU (pid {state.pid}, {'monitor quit' if how == 'quit' else how})"
        if how != "not running"
        else f"QEMU (pid {state.pid}) was not running"
    )
    return _emit(a, result, f"{text}; removed {len(removed)} files from {a.state_dir}")


def status(a: argparse.Namespace, context) -> int:
    a.state_dir = state_dir_of(a)
    state = read_state(a.state_dir)
    if state is None:
        return _emit(a, {"state_dir": str(a.state_dir), "running": False}, f"no board recorded in {a.state_dir}")
    running = state.board(a.state_dir).alive()
    result = {**describe(a.state_dir, state, running=running), "ssh": running and vm.ssh_banner(state.port)}
    if not running:
        return _emit(
            a, result, f"not running (QEMU pid {state.pid} has ended; q25deploy qemu down cleans up {a.state_dir})"
        )
    return _emit(
        a,
        result,
        f"running: QEMU pid {state.pid}, SSH on 127.0.0.1:{state.port} "
        f"({'answers' if result['ssh'] else 'no answer yet'}), serial log {result['serial_log']}, "
        f"state in {a.state_dir}",
    )


def _emit(a: argparse.Namespace, obj: dict, text: str) -> int:
    print(json.dumps(obj, indent=2) if a.json else text)
    return 0
