"""Every file the output commands write, byte for byte, against a recorded listing.

The listing (``tests/data/output_digests.txt``) is what ``tools/output_digests.py`` printed for
the tiny test model: every output of ``build`` for kv260, zcu104 and qemu, of ``export
tokenizer``, ``export tensors`` and ``export fixtures``. A refactoring (moving the packer, splitting a module)
must leave it as it is. A change that alters an output on purpose records the new listing in
the same commit, so the diff shows which files changed:

    Q25_RECORD_OUTPUT_DIGESTS=1 python3 -m pytest tests/packer/test_output_digests.py
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LISTING = ROOT / "tests" / "data" / "output_digests.txt"


def test_outputs_match_the_recorded_listing(qwen25_tiny, tmp_path):
    model_line = f"{hashlib.sha256(qwen25_tiny.read_bytes()).hexdigest()}  model: qwen25-tiny.gguf\n"
    # the builds record the model's path as given: a relative one keeps build.json the same
    shutil.copyfile(qwen25_tiny, tmp_path / "qwen25-tiny.gguf")
    run = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "output_digests.py"), "qwen25-tiny.gguf", "."],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    listing = model_line + run.stdout
    if os.environ.get("Q25_RECORD_OUTPUT_DIGESTS"):
        LISTING.write_text(listing)
    recorded = LISTING.read_text()
    assert recorded.splitlines()[0] == model_line.rstrip("\n"), "the tiny test model itself changed (not the packer)"
    changed = sorted(set(recorded.splitlines()) ^ set(listing.splitlines()))
    assert not changed, "outputs differ from tests/data/output_digests.txt:\n" + "\n".join(changed)
