"""goosebit (PyPI ``goosebit``, an update server implementing hawkBit's device API, DDI) on
loopback for the fleet test: its SQLite database created with ``aerich upgrade`` as its docs
say, served by uvicorn on 127.0.0.1, and driven through its own REST API (``/api/v1``) with
the first user's bearer token (``/setup``, as its UI's first page does).

goosebit runs under the Python of ``Q25_GOOSEBIT_PYTHON`` (.ci/run installs it into a venv of
its own: its dependencies would upgrade packages beside the suite's), else this interpreter
when it can import goosebit; missing, the test skips with the reason (fails on CI).
"""

from __future__ import annotations

import importlib.util
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from requirements import need, need_program, unavailable

TENANT = "DEFAULT"
HOW = "pip install goosebit==0.2.12 (a venv of its own; Q25_GOOSEBIT_PYTHON names its python)"


def goosebit_python() -> str:
    need_program("socat", "Debian: socat")  # the boards reach the server through it
    python = os.environ.get("Q25_GOOSEBIT_PYTHON")
    if python:
        need(Path(python).is_file(), f"Q25_GOOSEBIT_PYTHON={python}", HOW)
        return python
    if importlib.util.find_spec("goosebit") is None or importlib.util.find_spec("aerich") is None:
        unavailable("Python module goosebit (with aerich)", HOW)
    return sys.executable


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Goosebit:
    """A goosebit server under ``work`` (database, artifacts, log), polled every second."""

    def __init__(self, work: Path, python: str):
        self.work, self.python = work, python
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = work / "goosebit.log"
        db = work / "db.sqlite3"
        self.env = {
            **os.environ,
            "GOOSEBIT_DB_URI": f"sqlite:///{db}",
            "GOOSEBIT_ARTIFACTS_DIR": str(work / "artifacts"),
            "GOOSEBIT_POLL_TIME": "00:00:01",
            "GOOSEBIT_SECRET_KEY": secrets.token_urlsafe(32),
            "GOOSEBIT_TENANT": TENANT,
        }
        self.token = ""
        self.proc: subprocess.Popen | None = None
        self.socket = work / "ddi.sock"  # the boards' way in (socat to the TCP port)
        self.relay: subprocess.Popen | None = None

    def start(self) -> None:
        # aerich reads its configuration from pyproject.toml in its working directory: goosebit's
        # migrations, applied to the database of GOOSEBIT_DB_URI
        migrations = subprocess.run(
            [self.python, "-c", "import goosebit.db, pathlib; print(pathlib.Path(goosebit.db.__file__).parent)"],
            capture_output=True,
            text=True,
            env=self.env,
            cwd=self.work,
            timeout=120,
        )
        assert migrations.returncode == 0, migrations.stderr
        (self.work / "pyproject.toml").write_text(
            "[tool.aerich]\n"
            'tortoise_orm = "goosebit.db.config.TORTOISE_CONF"\n'
            f'location = "{migrations.stdout.strip()}/migrations"\n'
            'src_folder = "./."\n'
        )
        r = subprocess.run(
            [self.python, "-m", "aerich", "upgrade"],
            capture_output=True,
            text=True,
            env=self.env,
            cwd=self.work,
            timeout=120,
        )
        assert r.returncode == 0 and "Success upgrading" in r.stdout + r.stderr, r.stdout + r.stderr
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [self.python, "-m", "uvicorn", "goosebit:app", "--host", "127.0.0.1", "--port", str(self.port)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=self.work,
            )
        deadline = time.monotonic() + 60
        while True:
            try:
                self.token = self.form("/setup", {"username": "admin@q25.test", "password": secrets.token_hex(8)})
                break
            except (urllib.error.URLError, ConnectionError):
                assert self.proc.poll() is None, f"goosebit exited: {self.log.read_text()[-3000:]}"
                assert time.monotonic() < deadline, f"goosebit did not answer in 60 s: {self.log.read_text()[-3000:]}"
                time.sleep(0.3)

        self.relay = subprocess.Popen(
            ["socat", f"UNIX-LISTEN:{self.socket},fork", f"TCP:127.0.0.1:{self.port}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def stop(self) -> None:
        if self.relay is not None:
            try:
                os.killpg(self.relay.pid, signal.SIGKILL)  # socat and its forks
            except ProcessLookupError:
                pass
            self.relay.wait(timeout=20)
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=20)

    def form(self, path: str, fields: dict[str, str]) -> str:
        """POST a form (the login forms): the access token of the answer."""
        data = urllib.parse.urlencode(fields).encode()
        with urllib.request.urlopen(urllib.request.Request(self.url + path, data=data), timeout=30) as r:
            return json.loads(r.read())["access_token"]

    def api(self, method: str, path: str, body: dict | None = None, *, data: bytes = b"", ctype: str = ""):
        headers = {"Authorization": f"Bearer {self.token}"}
        if body is not None:
            data, ctype = json.dumps(body).encode(), "application/json"
        if ctype:
            headers["Content-Type"] = ctype
        req = urllib.request.Request(f"{self.url}/api/v1{path}", data=data or None, headers=headers, method=method)
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            raise AssertionError(f"goosebit {method} {path}: {e.code} {e.read().decode(errors='replace')}") from None

    def upload(self, swu: Path) -> int:
        """``PUT /api/v1/software`` with the file (multipart, as the UI's upload): its id."""
        boundary = secrets.token_hex(16)
        data = (
            (
                f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{swu.name}"\r\n'
                "Content-Type: application/octet-stream\r\n\r\n"
            ).encode()
            + swu.read_bytes()
            + f"\r\n--{boundary}--\r\n".encode()
        )
        return self.api("PUT", "/software", data=data, ctype=f"multipart/form-data; boundary={boundary}")["id"]

    def software(self) -> dict[int, dict]:
        return {s["id"]: s for s in self.api("GET", "/software")["software"]}

    def rollout(self, name: str, software_id: int, feed: str = "default") -> int:
        return self.api("PUT", "/rollouts", {"name": name, "feed": feed, "software_id": software_id})["id"]

    def rollouts(self) -> dict[int, dict]:
        return {r["id"]: r for r in self.api("GET", "/rollouts")["rollouts"]}

    def set_feed(self, devices: list[str], feed: str) -> None:
        self.api("PATCH", "/devices", {"devices": devices, "feed": feed})

    def devices(self) -> dict[str, dict]:
        return {d["id"]: d for d in self.api("GET", "/devices")["devices"]}

    def device_log(self, dev_id: str) -> str:
        return self.api("GET", f"/devices/{dev_id}/log").get("log") or ""
