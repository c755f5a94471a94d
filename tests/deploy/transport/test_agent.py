"""The board agent's protocol under the two shells boards have: dash (Debian's /bin/sh) and
BusyBox ash. The agent script runs in a real shell process; the host side talks to it through
its pipes as it would through an SSH channel (the SSH path itself is what the deploy tests on
sshd and the emulated board exercise)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from requirements import need_program

from q25deploy.deploy.transport.agent import PLAIN, Agent, command_line
from q25deploy.errors import DeployError
from q25deploy.tokenizer.prompts import SMOKE_PROMPTS


class PipeChannel:
    """The part of paramiko's Channel the agent uses, over a local process's pipes."""

    def __init__(self, argv: list[str]) -> None:
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)

    def settimeout(self, t) -> None:
        pass

    def sendall(self, data: bytes) -> None:
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def recv(self, n: int) -> bytes:
        return os.read(self.proc.stdout.fileno(), n)

    def shutdown_write(self) -> None:
        self.proc.stdin.close()

    def recv_exit_status(self) -> int:
        return self.proc.wait(10)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


SHELLS = {"dash": ["dash", "-c"], "busybox": ["busybox", "sh", "-c"]}


@pytest.fixture(params=sorted(SHELLS))
def agent(request):
    need_program(SHELLS[request.param][0], "Debian: dash / busybox-static")
    a = Agent("test", PipeChannel([*SHELLS[request.param], PLAIN, "sh"]))
    assert a.first_line() == "ready"
    yield a
    assert a.close() == 0


def test_commands_answer_in_order_with_status_and_both_streams(agent):
    assert agent.call(["sh", "-c", "echo out; echo err >&2; exit 3"], b"", 10) == (3, b"out\n", b"err\n")
    assert agent.call(["true"], b"", 10) == (0, b"", b"")
    status, out, _ = agent.call(["cat", "/no/such/file"], b"", 10)
    assert status != 0 and out == b""


def test_every_byte_of_stdin_and_arguments_arrives(agent):
    data = bytes(range(256)) * 3 + b"'\\%s%b\n\n"
    assert agent.call(["cat"], data, 10) == (0, data, b"")
    for text, _special in SMOKE_PROMPTS:  # newlines, CR, quotes, non-ASCII
        assert agent.call(["sh", "-c", 'printf "%s" "$1"', "sh", text.decode()], b"", 10)[1] == text
    odd = "a'b\"c $HOME `x` \\n\n\n"
    assert agent.call(["printf", "%s", odd], b"", 10)[1] == odd.encode()


def test_binary_output_and_large_output_are_framed_exactly(agent, tmp_path):
    blob = os.urandom(3 << 20)
    (tmp_path / "blob").write_bytes(blob)
    assert agent.call(["cat", str(tmp_path / "blob")], b"", 30)[1] == blob
    assert agent.call(["echo", "@@q25 0 0 0"], b"", 10)[1] == b"@@q25 0 0 0\n"  # a header in the output is data


def test_the_line_never_holds_a_raw_newline():
    line = command_line(["x", "a\nb"], b"c\nd", 5)
    assert line.count(b"\n") == 1 and line.endswith(b"\n")


def test_a_command_that_outlives_its_timeout_is_stopped(agent):
    if not shutil.which("timeout"):
        pytest.skip("no timeout program")
    status, _, _ = agent.call(["sleep", "30"], b"", 1)
    assert status in (124, 143)  # GNU timeout says 124, BusyBox's the signal (128 + TERM)


@pytest.mark.parametrize(
    "header", [b"@@q25 0 -5 0", b"@@q25 0 5", b"@@q25 x 0 0", b"@@q25 0 99999999999999999999 0", b"@@q25 0 \xd9\xa1 0"]
)
def test_a_malformed_header_is_an_error_not_a_read(header):
    """A board whose agent answers a header that is not three decimal counts (issue 22): that
    board's one-line error; a negative count was read as a slice of the buffer."""
    need_program("dash", "Debian: dash")
    script = b"echo ready; read -r line; printf '%s\\nrest\\n' '" + header + b"'; cat >/dev/null"
    a = Agent("hostile", PipeChannel(["dash", "-c", script.decode("utf-8", "surrogateescape")]))
    assert a.first_line() == "ready"
    with pytest.raises(DeployError, match="unexpected answer from the board"):
        a.call(["true"], b"", 10)
    a.close()


class Flood:
    """A channel whose board answers every command with ``head`` then ``total`` bytes of ``x``
    (no newline), counting what the host asked for and what it took."""

    def __init__(self, head: bytes, total: int) -> None:
        self.data, self.pos, self.asked = head, 0, 0
        self.total = len(head) + total

    def settimeout(self, t) -> None:
        pass

    def sendall(self, data: bytes) -> None:
        pass

    def recv(self, n: int) -> bytes:
        self.asked = max(self.asked, n)
        take = min(n, self.total - self.pos)
        out = (self.data[self.pos : self.pos + take] if self.pos < len(self.data) else b"").ljust(take, b"x")
        self.pos += take
        return out


@pytest.mark.parametrize(
    ("head", "what"),
    [(b"", "line"), (b"@@q25 0 99999999 0\n", "answer to cat"), (b"@@q25 0 999999999999999 0\n", "answer to cat")],
)
def test_what_a_board_sends_is_bounded(head, what):
    """A header line that does not end, and a header that announces more than any answer, are
    refused once the bound is passed (issue 33, item 6): never read to their end, never a
    read of the size the board announced."""
    from q25deploy.deploy.transport.limits import CHUNK, MAX_LINE

    chan = Flood(head, 20 << 20)
    with pytest.raises(DeployError, match=f"board's {what} is larger than"):
        Agent("b", chan).call(["cat", "f"], b"", 10)
    assert chan.pos <= MAX_LINE + 2 * CHUNK and chan.asked <= CHUNK
