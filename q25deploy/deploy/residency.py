"""Residency on a board: the current release's partitions in their reserved DDR regions.

``q25tok load`` (after a deploy's switch, and after switching back) copies every partition
of ``current/partitions/regions.tab`` into its no-map region through ``/dev/mem``;
``q25tok verify`` (in the smoke test) reads them back. The q25tok used is the release's own
(``--runtime-bin``) or the image's. Both refuse regions the running device tree does not
reserve (the image predates the build's reserved memory): like the device-tree check, a
warning, a failure with ``--strict``.
"""

from __future__ import annotations

from .become import hint as become_hint
from .connection import Board

from ..build.layout import REGION_TABLE as TABLE
EXIT_REGION = 6  # q25tok: not reserved in the running device tree, or the bytes differ


def run_q25tok(board: Board, files, command: str, q25tok: str, *, memory: str, device_tree: str) -> dict:
    """``q25tok load|verify`` on ``current``'s region table through ``memory`` (``/dev/mem``),
    checked against ``device_tree``; per-region results."""
    cur = files.path("current")
    table = f"{cur}/{TABLE}"
    script = ('[ -f "$4" ] || { echo no-table; exit 0; }; q="$1/q25tok"; [ -x "$q" ] || q="$2"; '
              'exec "$q" "$3" --mem "$5" --dt "$6" "$4"')
    status, out, err = board.run(["sh", "-c", script, "sh", cur, q25tok, command, table,
                                  memory, device_tree],
                                 check=False, timeout=600)
    text = out.decode("utf-8", "replace")
    if text.strip() == "no-table":
        return {"state": "no-table", "regions": []}
    regions = []
    for line in text.splitlines():
        f = line.split()
        if len(f) >= 3 and f[0] == "region":
            r = {"node": f[1], "state": next((w for w in ("loaded", "resident", "MISMATCH", "REFUSED", "FAILED")
                                              if w in f), "unknown")}
            if "sha256" in f and f.index("sha256") + 1 < len(f):
                r["sha256"] = f[f.index("sha256") + 1]
            if r["state"] in ("REFUSED", "FAILED"):
                r["detail"] = line.split(r["state"], 1)[1].strip()
            regions.append(r)
    if status == 0 and regions and all(r["state"] in ("loaded", "resident") for r in regions):
        state = "resident"
    elif status == EXIT_REGION and regions and all(r["state"] == "REFUSED" for r in regions):
        state = "not-reserved"
    elif status == 2 or (not regions and status in (126, 127)):
        state = "unsupported"  # a q25tok without load/verify, or none at all
    else:
        state = "failed"
    detail = "; ".join(f"{r['node']}: {r['state']} {r.get('detail', '')}".strip() for r in regions
                       if r["state"] not in ("loaded", "resident"))
    if not regions:
        detail = (err or out).decode("utf-8", "replace").strip()[-200:]
    detail += become_hint(board.spec.user, board.become, detail)  # /dev/mem is root's
    return {"state": state, "regions": regions, "detail": detail}


def load(board: Board, files, q25tok: str, **paths: str) -> dict:
    return run_q25tok(board, files, "load", q25tok, **paths)


def verify(board: Board, files, q25tok: str, **paths: str) -> dict:
    return run_q25tok(board, files, "verify", q25tok, **paths)
