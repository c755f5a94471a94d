"""The README's and the docs' examples run as written (from a scratch directory): every
``console`` block on the host, and the README walk-through's board blocks (marked
``<!-- board -->``) on the emulated board, in the README's order."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from requirements import need_program

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
# the pages whose console examples run after the README's, in this order (they use its model and builds)
PAGES = ["docs/models.md", "docs/building.md", "docs/commands.md", "docs/ota.md"]
VENV = "python3 -m venv .venv && . .venv/bin/activate && "  # PEP 668: the distribution's Python wants a venv
SETUP = [
    VENV + "pip install . && q25deploy build --target kv260",
    VENV
    + "CMAKE_ARGS=\"-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF\" pip install --no-cache-dir '.[test,reference]' && python -m pytest -q",
]
WALK_THROUGH = "\n## Walk-through"
BOARD_PORT = "2222"  # the qemu board file's ssh.port, as the README's commands use it


@dataclass(frozen=True)
class Block:
    commands: tuple[str, ...]
    board: bool  # needs the emulated board


def console_blocks(text: str) -> list[Block]:
    return [
        Block(tuple(line[2:] for line in body.splitlines() if line.startswith("$ ")), bool(mark))
        for mark, body in re.findall(r"(<!-- board -->\n)?```console\n(.*?)```", text, re.S)
    ]


def walk_through(text: str) -> str:
    return WALK_THROUGH + text.split(WALK_THROUGH, 1)[1].split("\n## ", 1)[0]


def scratch(tmp_path: Path) -> Path:
    """A directory to run examples in, with the repository's fixtures and scripts beside them."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    for name in ("tests", "targets", "tools"):
        (tmp_path / name).symlink_to(ROOT / name)
    return tmp_path


def run(cmd: str, cwd: Path, env: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, shell=True, cwd=cwd, capture_output=True, text=True, env=env, timeout=timeout)
    assert r.returncode == 0, f"{cmd}\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    return r


def test_the_setup_commands_are_the_ones_ci_runs():
    """The README's two set-up commands, unchanged, and .ci/run installs and tests exactly so
    (CI's root is a throw-away container: it installs without the venv)."""
    blocks = console_blocks(README.read_text().split(WALK_THROUGH, 1)[0])
    assert [c for b in blocks for c in b.commands] == SETUP
    ci = (ROOT / ".ci" / "run").read_text()
    install = """env CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF" python3 -m pip install --no-cache-dir '.[test,reference]'\n"""
    assert install in ci and 'stage "pytest" python3 -m pytest -q\n' in ci


def test_readme_is_a_tour():
    text = README.read_text()
    assert len(text.splitlines()) <= 200
    steps = re.findall(r"^\*\*(\d)\. ", walk_through(text), re.M)
    assert steps == [str(i) for i in range(1, len(steps) + 1)] and len(steps) >= 6
    for page in re.findall(r"\]\((docs/[^)#]+)", text):  # every link leads somewhere
        assert (ROOT / page).is_file(), page


def test_examples_run(tmp_path):
    """Every console example that needs no board, README first, as a newcomer would type it."""
    need_program("q25deploy", "pip install . puts the console script on PATH")
    cwd = scratch(tmp_path)
    env = {**os.environ, "PYTHONPATH": ""}
    ran = 0
    for page in ["README.md", *PAGES]:
        for block in console_blocks((ROOT / page).read_text()):
            if block.board:
                continue
            for cmd in block.commands:
                # installing and the full test suite / benchmarks are what CI itself runs
                cmd = re.sub(r"^python3 -m venv .*?pip install [^&]*&& ", "", cmd)
                if "pytest" in cmd or cmd.startswith("python3 bench/"):
                    continue
                run(cmd, cwd, env, timeout=300)
                ran += 1
    assert ran >= 25
    assert (cwd / "q25-out" / "qemu-64k" / "tokenizer" / "tokenizer.q25tokrt").is_file()
    assert (cwd / "q25-out" / "qwen25-tokenizer" / "tokenizer.q25tokrt").is_file()
    shutil.rmtree(cwd / "q25-out")


def test_the_first_command_runs_with_the_distributions_python(tmp_path):
    """The README's first command as written, on a stock Debian's own Python (PEP 668: it
    refuses pip outside a venv): a copy of the tracked files, a fresh HOME, PATH and
    environment without this test run's venv or PIP_BREAK_SYSTEM_PACKAGES; pip uses the
    machine's configured index (offline here). It must reach the build's output. ~20 s."""
    need_program("/usr/bin/python3", "the distribution's Python (Debian: python3-venv)")
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout
    clone = tmp_path / "clone"
    for name in filter(None, files.decode().split("\0")):
        src = ROOT / name
        if src.is_file():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, clone / name)
    env = {k: v for k, v in os.environ.items() if k.startswith("PIP_") or k in ("LANG", "TERM")}
    env.pop("PIP_BREAK_SYSTEM_PACKAGES", None)
    env.pop("PIP_REQUIRE_VIRTUALENV", None)
    env.update(HOME=str(tmp_path / "home"), PATH="/usr/bin:/bin", PIP_QUIET="1")
    r = run(SETUP[0], clone, env, timeout=300)
    assert "built: kv260" in r.stdout
    assert (clone / "q25-build" / "kv260" / "manifest.json").is_file()
    assert (clone / ".venv" / "bin" / "q25deploy").is_file()


def test_walk_through_on_the_emulated_board(tmp_path, board_root):
    """The walk-through top to bottom, its board steps against the emulated board booted by
    its own ``qemu up`` (a free port instead of 2222; the README's key is a fresh one)."""
    from board_fixtures import BOARD_CACHE
    from sshd import free_port, keygen

    need_program("q25deploy", "pip install . puts the console script on PATH")
    need_program("aarch64-linux-gnu-gcc", "Debian: gcc-aarch64-linux-gnu")
    need_program("ssh-keygen", "Debian: openssh-client")
    cwd = scratch(tmp_path / "work")
    home = Path(tempfile.mkdtemp(prefix="q25h-"))  # short: the board's monitor socket lives under it
    (home / ".ssh").mkdir(parents=True)
    keygen(home / ".ssh" / "id_ed25519")
    env = {
        **os.environ,
        "PYTHONPATH": "",
        "HOME": str(home),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "Q25_BOARD_CACHE": str(BOARD_CACHE),
    }
    env.pop("XDG_STATE_HOME", None)  # the README's known_hosts: ~/.local/state/q25deploy/qemu/qemu
    port = str(free_port())
    blocks = console_blocks(walk_through(README.read_text()))
    assert sum(b.board for b in blocks) >= 3
    try:
        for block in blocks:
            for cmd in block.commands:
                cmd = cmd.replace(f"127.0.0.1:{BOARD_PORT}", f"127.0.0.1:{port}")
                if cmd.startswith("q25deploy qemu up "):
                    cmd += f" --ssh-port {port}"
                run(cmd, cwd, env)
    finally:
        subprocess.run(["q25deploy", "qemu", "down"], cwd=cwd, env=env, capture_output=True, timeout=120)
    svg = (cwd / "q25-out" / "qemu-board.svg").read_text()  # every region as the board reported it
    assert "used, resident" in svg and not re.search(r"used, (differs|missing|unknown)", svg)
    assert not (home / ".local/state/q25deploy/qemu/qemu/state.json").exists()  # qemu down stopped it
    assert not (cwd / "q25-qemu").exists()  # nothing of the board in the working tree
    shutil.rmtree(home)
