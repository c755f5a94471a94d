"""Print the sha256 of every file the output commands write, for one model.

A refactoring check: run it before and after a change and diff the two listings; every
output of ``build`` (kv260, zcu104, qemu), ``export tokenizer``, ``export tensors`` and
``export fixtures`` must be byte-identical. The build's stamp file is left out (it records local paths and mtimes).

    python3 tools/output_digests.py MODEL.gguf WORKDIR > before.txt
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

SKIP = {".q25deploy-stamp.json"}


def run(*argv: str) -> None:
    subprocess.run([sys.executable, "-m", "q25deploy", *argv], check=True, stdout=subprocess.DEVNULL)


def main() -> int:
    model, work = sys.argv[1], Path(sys.argv[2])
    outs = []
    for target in ("kv260", "zcu104", "qemu"):
        outs.append(work / f"build-{target}")
        run("build", "--target", target, "--model", model, "--out", str(outs[-1]))
    outs.append(work / "tokenizer")
    run("export", "tokenizer", model, "--out", str(outs[-1]))
    outs.append(work / "tensors")
    run("export", "tensors", model, "--out", str(outs[-1]))
    outs.append(work / "fixtures")
    run("export", "fixtures", model, "--out", str(outs[-1]))
    for out in outs:
        for path in sorted(p for p in out.rglob("*") if p.is_file() and p.name not in SKIP):
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            print(f"{digest}  {path.relative_to(work)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
