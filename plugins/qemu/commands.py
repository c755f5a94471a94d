"""The handlers of ``q25deploy qemu up|down|status`` (parsed by :mod:`.cli`)."""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass
from pathlib import Path

from q25deploy.errors import BoardFileError, DeployError, UsageError

from . import vm
from .machine import Boot, Files, Machine, dtb_files, kernel_cmdline, make_dtb, need_tool
from .state import STATE_FILE, State, read_state, remove_files, write_state

KNOWN_HOSTS = "known_hosts"  # the board's host key, recorded by the first deploy --trust-new-host


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
    state_dir = a.state_dir
    made = _take_state_dir(state_dir)
    files = Files.in_dir(state_dir)
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
    if a.wait:
        result["ssh_seconds"] = round(vm.wait_for_ssh(board, a.timeout), 1)
        result["ssh"] = True
    return _emit(a, result, _up_text(result, target.name, a.build))


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


def _up_text(r: dict, target: str, build: Path | None) -> str:
    waited = f", SSH up after {r['ssh_seconds']} s" if "ssh_seconds" in r else " (booting: add --wait to wait for SSH)"
    opts = (
        f"--target {target} --host {r['host']}{f' --build {build}' if build else ''} --known-hosts {r['known_hosts']}"
    )
    state_opt = "" if Path(r["state_dir"]) == Path("q25-qemu") else f" --state-dir {r['state_dir']}"
    user, port = r["host"].split("@")[0], r["port"]
    return "\n".join(
        [
            f"QEMU runs (pid {r['pid']}){waited}",
            f"  serial log  {r['serial_log']}",
            f"  monitor     {r['monitor']} (HMP)",
            f"  ssh         ssh -p {port} -o UserKnownHostsFile={r['known_hosts']} {user}@127.0.0.1",
            f"  deploy      q25deploy deploy {opts} --trust-new-host",
            f"  smoke       q25deploy smoke {opts} --strict",
            f"  stop        q25deploy qemu down{state_opt}",
        ]
    )


def down(a: argparse.Namespace, context) -> int:
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
    state = read_state(a.state_dir)
    if state is None:
        return _emit(a, {"state_dir": str(a.state_dir), "running": False}, f"no board recorded in {a.state_dir}")
    running = state.board(a.state_dir).alive()
    result = {**describe(a.state_dir, state, running=running), "ssh": running and vm.ssh_banner(state.port)}
    if not running:
        return _emit(a, result, f"not running (QEMU pid {state.pid} has ended; q25deploy qemu down cleans up)")
    return _emit(
        a,
        result,
        f"running: QEMU pid {state.pid}, SSH on 127.0.0.1:{state.port} "
        f"({'answers' if result['ssh'] else 'no answer yet'}), serial log {result['serial_log']}",
    )


def _emit(a: argparse.Namespace, obj: dict, text: str) -> int:
    print(json.dumps(obj, indent=2) if a.json else text)
    return 0
