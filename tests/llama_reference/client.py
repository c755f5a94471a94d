"""llama.cpp for the tests, in a child process: a crash (SIGSEGV, SIGILL of a build for another
CPU) or a hang there fails the one test that called it, with the signal and the library's
system info, and the next call starts a new child; the test session goes on.

``LlamaReference().model(path, **params)`` stands for ``llama_cpp.Llama(model_path=path,
verbose=False, **params)``: its ``tokenize``, ``detokenize``, ``logits`` (every position of
the ids, evaluated from an empty cache) and ``greedy`` (tokens and logits of greedy steps) run
in the child. The ``llama_reference`` fixture (tests/conftest.py) gives one child per module.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from llama_reference.frames import HEADER, write_frame

TESTS = Path(__file__).resolve().parent.parent
CALL_SECONDS = float(os.environ.get("Q25_REFERENCE_SECONDS", "600"))  # one call's bound
START_SECONDS = 120.0  # import of llama_cpp and its system info


class ReferenceFailed(Exception):
    """The child crashed, hung or raised: the message says which, with its system info."""


class LlamaReference:
    def __init__(self, call_seconds: float = CALL_SECONDS) -> None:
        self.call_seconds = call_seconds
        self.proc: subprocess.Popen | None = None
        self.info: dict = {}
        self._stderr: Any = None

    # the child
    def start(self) -> None:
        self._stderr = tempfile.TemporaryFile()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "llama_reference.child"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
        )
        what, info = self._answer(START_SECONDS, "starting")
        if what != "hello":
            raise self._failed(f"the child's first answer was {what!r}")
        self.info = info

    def ensure_started(self) -> subprocess.Popen:
        """The running child: a new one when there is none, or the last one ended."""
        if self.proc is None or self.proc.poll() is not None:
            self.start()
        assert self.proc is not None
        return self.proc

    @property
    def pid(self) -> int:
        return self.ensure_started().pid

    def close(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                assert self.proc.stdin is not None
                self.proc.stdin.close()
                try:
                    self.proc.wait(10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
            for f in (self.proc.stdout, self._stderr):
                if f is not None:
                    f.close()
            self.proc = None

    # the wire
    def request(self, what: str, args: Any, seconds: float | None = None) -> Any:
        proc = self.ensure_started()
        assert proc.stdin is not None
        try:
            write_frame(proc.stdin, (what, args))
            proc.stdin.flush()
        except BrokenPipeError:
            pass  # the child is gone: the answer's read says how it ended
        status, value = self._answer(self.call_seconds if seconds is None else seconds, what)
        if status == "error":
            raise ReferenceFailed(f"llama.cpp raised in the child:\n{value}")
        return value

    def _read(self, n: int, deadline: float, doing: str) -> bytes:
        assert self.proc is not None and self.proc.stdout is not None
        fd, parts, left = self.proc.stdout.fileno(), [], n
        while left:
            wait = deadline - time.monotonic()
            if wait <= 0 or not select.select([fd], [], [], wait)[0]:
                self.proc.kill()
                self.proc.wait()
                raise self._failed(f"no answer to {doing!r} in {self.call_seconds:g} s: the child was killed")
            chunk = os.read(fd, left)
            if not chunk:
                raise self._failed(f"the child ended during {doing!r}")
            parts.append(chunk)
            left -= len(chunk)
        return b"".join(parts)

    def _answer(self, seconds: float, doing: str) -> Any:
        deadline = time.monotonic() + seconds
        size = HEADER.unpack(self._read(HEADER.size, deadline, doing))[0]
        return pickle.loads(self._read(size, deadline, doing))

    def _failed(self, what: str) -> ReferenceFailed:
        assert self.proc is not None
        try:
            code = self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"
        self._stderr.seek(0)
        tail = self._stderr.read()[-3000:].decode(errors="replace").strip()
        info = self.info.get("system_info", "(the child died before it said)")
        self.close()
        return ReferenceFailed(
            f"llama.cpp's child process: {what} ({how})\n"
            f"llama-cpp-python {self.info.get('version', '?')}, system info: {info}\n"
            f"its stderr, last lines:\n{tail or '(nothing)'}"
        )

    # what the tests call
    def model(self, path: Path | str, **params: Any) -> RemoteModel:
        return RemoteModel(self, str(path), tuple(sorted(params.items())))


@dataclass(frozen=True)
class RemoteModel:
    ref: LlamaReference
    path: str
    params: tuple

    def _call(self, name: str, *args: Any) -> Any:
        return self.ref.request("call", (self.path, self.params, name, args))

    def tokenize(self, data: bytes, add_bos: bool = False, special: bool = False) -> list[int]:
        return self._call("tokenize", data, add_bos, special)

    def detokenize(self, ids: list[int], special: bool = False) -> bytes:
        return self._call("detokenize", list(ids), special)

    def logits(self, ids: list[int]) -> np.ndarray:
        """llama.cpp's logits of every position of ``ids``, evaluated in one batch from an empty cache."""
        return self._call("logits", list(ids))

    def greedy(self, ids: list[int], steps: int) -> tuple[list[int], np.ndarray]:
        """llama.cpp's greedy tokens after ``ids`` and the logits each was taken from."""
        return self._call("greedy", list(ids), steps)
