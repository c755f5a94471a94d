"""The on-board smoke test: what runs there gives the host's token ids and the host's forward pass.

Checks, on the release ``current`` points at: ``q25tok info`` on the image; every prompt of
:mod:`q25deploy.tokenizer.prompts` encoded on the board equals the host codec's ids; the
partition files' sha256 equal the partition map's; the live device tree
(``/proc/device-tree/reserved-memory/<node>/reg``) holds the planned regions — a warning
when the running image predates them, a failure with ``strict`` or when a node reserves
other memory; the reserved regions hold the partitions (``q25tok verify``, see
:mod:`.residency`); given the build's ``probe_digests.json``, the weights as the board reads
them from those regions (``q25tok probe``, see :mod:`q25deploy.packer.probe`): a tensor whose
digest differs fails by name, regions that are not resident are a warning (a failure with
``strict``); given the build's ``forward_record.json``, the forward pass on the board from
those weights against the host's (:mod:`.forward_check`); plus any checks board plugins add.
"""

from __future__ import annotations

import posixpath
import struct
from collections.abc import Sequence

from ...errors import Q25Error
from ...plugin.routing import board_hooks
from ...tokenizer.prompts import SMOKE_PROMPTS
from ..state.residency import PENDING, differing_tensors, load, q25tok_argv, verify
from ..transport.boardbase import HASH_FILES, BoardSession
from .deployer import BoardFiles
from .forward_check import forward_beside_load, forward_step

DETAIL = 200  # characters of a board's answer a check keeps


def head(answer: bytes, limit: int = DETAIL) -> str:
    """The start of what a board printed (where it says what it is, or what went wrong), one
    line, cut at ``limit`` characters with an ellipsis: never a tail starting mid-word."""
    text = " ".join(answer.decode("utf-8", "replace").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class _Report:
    """The checks and warnings of one smoke test; ``strict`` turns warnings into failures."""

    def __init__(self, strict: bool) -> None:
        self.strict = strict
        self.checks: list[dict] = []
        self.warnings: list[str] = []

    def check(self, name: str, ok: bool, detail: str = "", **extra) -> bool:
        """``extra``: more of what the check saw, for ``--json`` (the forward pass's tokens)."""
        self.checks.append({"name": name, "ok": ok, "detail": detail, **extra})
        return ok

    def warn(self, name: str, msg: str) -> None:
        if self.strict:
            self.check(name, False, msg)
        else:
            self.warnings.append(msg)

    def result(self, **extra) -> dict:
        return {"ok": all(c["ok"] for c in self.checks), "checks": self.checks, "warnings": self.warnings, **extra}


def smoke_test(
    board: BoardSession,
    files: BoardFiles,
    *,
    expected: Sequence[list[int]],
    partition_map: dict,
    image_name: str,
    q25tok: str,
    strict: bool = False,
    extra_checks: Sequence[tuple[str, str | None, str]] = (),
    board_paths: dict[str, str] | None = None,
    quick: bool = False,
    residency: dict | None = None,
    probe: dict | None = None,
    forward: dict | None = None,
    known: dict[str, str] | None = None,
) -> dict:
    """``expected``: the host codec's ids of each smoke prompt (:mod:`.expected`).
    ``board_paths``: ``device_tree`` and ``memory`` on the board (default /proc/device-tree,
    /dev/mem). ``quick``: the files were proven moments ago (a deploy hashed them as it wrote
    them), so the partitions are not hashed again; ``residency``: what a load just reported
    (read back and checked by it), used instead of reading the regions again; ``probe``: the
    build's ``probe_digests.json`` (none: no probe); ``forward``: the build's
    ``forward_record.json`` (none: no forward pass, :mod:`.forward_check`); ``known``: the
    passes the board's state records (:mod:`.forward_known`), whose key skips the pass, and the
    result's ``forward`` is the entry to record (None: the pass always runs, nothing to record)."""
    board_paths = board_paths or {"device_tree": "/proc/device-tree", "memory": "/dev/mem"}
    report = _Report(strict)
    cur = files.cur()
    image = posixpath.join(cur, image_name)
    due = forward is not None and forward["model_sha256"] == partition_map.get("model", {}).get("sha256")
    loading = residency is not None and residency.get("state") == PENDING["state"]
    if loading and not due:  # no pass to run beside it: the load first, as ever
        residency, loading = load(board, files, q25tok, compare=True, **board_paths), False
    want_sha = forward is not None and known is not None  # the forward pass's key needs q25tok's sha256
    ok, sha = _check_image(board, report, expected, q25tok, image, want_sha)
    if not ok:
        if loading:
            residency = load(board, files, q25tok, compare=True, **board_paths)
        return report.result(residency=residency)
    regions = partition_map.get("regions", [])
    if not quick:
        _check_partitions(board, report, cur, regions)
    _check_device_tree(board, report, board_paths["device_tree"], regions)
    passed = None
    beside = _Report(strict)  # the forward pass's checks, after the residency's and the probe's
    if loading and forward is not None:
        passed, residency = forward_beside_load(
            board,
            beside,
            cur,
            q25tok,
            forward,
            board_paths,
            q25tok_argv(files, "load", q25tok, compare=True, **board_paths),
            partition_map=partition_map,
            known=known,
            q25tok_sha256=sha or "",
        )
    elif residency is None or residency.get("state") not in ("resident", "failed"):
        residency = verify(board, files, q25tok, **board_paths)  # the regions hold the partitions
    _check_residency(report, residency, partition_map)
    if probe is not None:
        _check_probe(board, report, cur, q25tok, probe, residency, board_paths, partition_map)
    report.checks += beside.checks
    report.warnings += beside.warnings
    if due and not loading and forward is not None:
        passed = forward_step(  # not: another model's weights
            board,
            report,
            cur,
            q25tok,
            forward,
            residency,
            board_paths,
            partition_map=partition_map,
            known=known,
            q25tok_sha256=sha or "",
        )
    run_plugin_checks(board, report, extra_checks)
    return report.result(residency=residency, **({"forward": passed} if passed else {}))


def plugin_checks(pm, target) -> list[tuple[str, str | None, str]]:
    """The target's plugin's extra smoke checks (``q25deploy_smoke_checks``) as (name, command, "");
    a hook that raises (one line naming the plugin: plugin/routing.py) or gives something else
    than (name, command) is one (name, None, why) entry: every board's smoke test then fails
    that check in one line (never exit 70)."""
    hook = f"q25deploy_smoke_checks of plugin {target.plugin!r}"
    try:
        results = list(board_hooks(pm, target).q25deploy_smoke_checks(board=target.board))
    except Q25Error as e:
        return [("plugin checks", None, str(e)[:200])]
    out: list[tuple[str, str | None, str]] = []
    for res in results:
        for c in res if isinstance(res, (list, tuple)) else [res] if res is not None else []:
            if isinstance(c, (list, tuple)) and len(c) == 2 and all(isinstance(x, str) for x in c):
                out.append((c[0], c[1], ""))
            else:
                out.append(("plugin checks", None, f"{hook} gave {c!r}, not (name, shell command)"[:200]))
    return out


def run_plugin_checks(board: BoardSession, report: _Report, checks: Sequence[tuple[str, str | None, str]]) -> None:
    for name, command, why in checks:
        if command is None:
            report.check(name, False, why)
            continue
        status, out, err = board.run(["sh", "-c", command], check=False)
        report.check(name, status == 0, (err or out).decode("utf-8", "replace").strip()[-200:])


# One board command for the image: $1 q25tok, $2 image, $3 "sha" (or "-"), then per prompt
# "plain|special" and its text. `q25tok info` on the image (nothing more when it fails); the
# prompts written as files (in a private temporary directory), encoded by one q25tok call per
# kind, in the prompts' order; with "sha", the sha256 of the q25tok that ran (the forward pass's
# key, :mod:`..state.forward_known`). Exits with info's status, else the encoders'.
IMAGE_CHECKS = r"""q=$1; img=$2; sha=$3; shift 3; "$q" info "$img" || exit $?; echo "@@ids"
d=$(mktemp -d "${TMPDIR:-/tmp}/q25prompts.XXXXXX") || exit 1; i=0; plain=; special=
while [ $# -gt 1 ]; do i=$((i + 1)); printf '%s' "$2" > "$d/$i" || exit 1
  if [ "$1" = special ]; then special="$special $d/$i"; else plain="$plain $d/$i"; fi; shift 2; done
st=0; if [ -n "$plain" ]; then "$q" encode "$img" $plain || st=$?; fi
echo "@@special"; if [ -n "$special" ]; then "$q" encode --special "$img" $special || st=$?; fi
rm -rf "$d"; if [ "$sha" = sha ]; then echo "@@sha256"; sha256sum "$(command -v "$q")"; fi; exit $st"""


def _check_image(
    board: BoardSession, report: _Report, expected: Sequence[list[int]], q25tok: str, image: str, want_sha: bool
) -> tuple[bool, str | None]:
    """``q25tok info`` on the image, then every smoke prompt encoded on the board gives the
    ``expected`` ids (the host codec's, see :mod:`.expected`): one board command. Returns
    whether info passed and, with ``want_sha``, the q25tok's sha256 as the board printed it
    (None: not asked)."""
    args = []
    for text, special in SMOKE_PROMPTS:
        args += ["special" if special else "plain", text.decode("utf-8")]
    argv = ["sh", "-c", IMAGE_CHECKS, "sh", q25tok, image, "sha" if want_sha else "-", *args]
    status, out, err = board.run(argv, check=False)
    info, marked, rest = out.decode("utf-8", "replace").partition("@@ids\n")
    if not report.check("q25tok info", bool(marked), head(info.encode() if marked else err)):
        return False, None
    ids, _, sha = rest.partition("@@sha256\n")
    _check_ids(report, expected, ids, status, err)
    return True, (sha.split() or [""])[0] if want_sha else None


def _check_ids(report: _Report, expected: Sequence[list[int]], out: str, status: int, err: bytes) -> None:
    """The encoders' lines (plain prompts, ``@@special``, then the special ones) against the
    ``expected`` ids."""
    plain_out, _, special_out = out.partition("@@special\n")
    lines = {False: plain_out.splitlines(), True: special_out.splitlines()}
    seen = {False: 0, True: 0}
    for i, (_text, special) in enumerate(SMOKE_PROMPTS):
        want = expected[i]
        row = lines[special][seen[special]] if seen[special] < len(lines[special]) else None
        seen[special] += 1
        try:
            got = [int(x) for x in row.split()] if row is not None else None
        except ValueError:
            got = None
        report.check(
            f"encode prompt {i}",
            status == 0 and got == want,
            "" if got == want else _ids_differ(got, want, err),
        )


def _ids_differ(got: list[int] | None, want: list[int], err: bytes) -> str:
    """Where the board's ids leave the host's: the first id that differs and the next few of each."""
    if not got:
        return f"board printed no ids ({head(err, 120) or 'nothing on stderr'}); host {want[:8]}"
    k = next((i for i, (g, w) in enumerate(zip(got, want)) if g != w), min(len(got), len(want)))
    return f"id {k} of {len(want)}: board {got[k : k + 8]} ({len(got)} ids), host {want[k : k + 8]}"


def _check_partitions(board: BoardSession, report: _Report, cur: str, regions: list[dict]) -> None:
    if regions:
        paths = {posixpath.join(cur, r["file"]): r["file"] for r in regions}
        status, out, _ = board.run(["sh", "-c", HASH_FILES, "sh", *paths], check=False, timeout=3600)
        got = {paths.get(p): d for d, _, p in (ln.partition(" ") for ln in out.decode("utf-8", "replace").splitlines())}
        bad = [r["file"] for r in regions if got.get(r["file"]) != r["sha256"]]
        report.check("partition sha256", status == 0 and not bad, ", ".join(bad))


def _check_device_tree(board: BoardSession, report: _Report, device_tree: str, regions: list[dict]) -> None:
    """The running kernel's device tree reserves every planned region at its base and size."""
    for r in regions:
        status, out, _ = board.run(["cat", f"{device_tree}/reserved-memory/{r['node']}/reg"], check=False)
        want = struct.pack(">QQ", r["base"], r["size"])
        if status != 0:
            report.warn(
                f"device tree {r['node']}",
                f"live device tree has no {r['node']}: the running image predates this build's reserved memory",
            )
        else:
            report.check(
                f"device tree {r['node']}",
                out == want,
                "" if out == want else f"reg is {out.hex()}, planned {want.hex()}",
            )


def _check_residency(report: _Report, resident: dict, pmap: dict) -> None:
    """q25tok verify read the regions back: resident, not reserved / unsupported (a warning), or failed."""
    if resident["state"] == "resident":
        report.check("residency", True, f"{len(resident['regions'])} region(s) hold their partitions")
    elif resident["state"] in ("not-reserved", "unsupported"):
        report.warn(
            "residency",
            "the partitions are not loaded into reserved memory: "
            + (
                "the running device tree does not reserve the regions"
                if resident["state"] == "not-reserved"
                else f"this q25tok has no load/verify ({resident['detail'][-80:]})"
            ),
        )
    elif resident["state"] == "failed":
        bad = [r for r in resident["regions"] if r["state"] not in ("loaded", "resident")]
        named = {r["node"]: differing_tensors(r, pmap) for r in bad}
        if any(named.values()):  # the region's line, then the tensors whose bytes differ in it
            parts = [" ".join(f"{r['node']}: {r['state']} {r.get('detail', '')}".split()) for r in bad]
            detail = "; ".join(p + (f": {named[r['node']]}" if named[r["node"]] else "") for p, r in zip(parts, bad))
        else:
            detail = resident["detail"]
        report.check("residency", False, detail)


def _check_probe(
    board: BoardSession, report: _Report, cur: str, q25tok: str, record: dict, residency: dict, paths: dict, pmap: dict
) -> None:
    """``q25tok probe`` (one board command) reads the resident regions' first and last blocks
    of every tensor and the smoke ids' embedding rows, dequantized: the digests equal the
    build's (``record``)."""
    from ...layout import REGION_TABLE, TENSOR_TABLE
    from ...packer.probe import mismatches

    if record["model_sha256"] != pmap.get("model", {}).get("sha256"):
        return  # the board keeps another model's weights (--tokenizer-only): its partition map checks them
    if residency.get("state") not in ("resident", "failed"):  # failed: reserved, but not as built
        report.warn("tensor probe", "tensor probe not run: the partitions are not in reserved memory")
        return
    tables = [posixpath.join(cur, REGION_TABLE), posixpath.join(cur, TENSOR_TABLE)]
    argv = [q25tok, "probe", "--mem", paths["memory"], "--dt", paths["device_tree"], *tables]
    status, out, err = board.run([*argv, *map(str, record["ids"])], check=False, timeout=600)
    if status == 2:  # a q25tok without probe
        report.warn(
            "tensor probe", f"tensor probe not run: this q25tok has no probe ({err.decode('utf-8', 'replace')[-80:]})"
        )
        return
    bad = mismatches(record, out.decode("utf-8", "replace"))
    detail = err.decode("utf-8", "replace").strip()[-200:] if status else ""
    if bad:
        detail = f"{len(bad)} tensor(s) differ from the build: {', '.join(bad[:5])}" + ("…" if len(bad) > 5 else "")
    report.check("tensor probe", status == 0 and not bad, detail or f"{len(record['tensors'])} tensors as built")
