"""Residency on a board: the current release's partitions in their reserved DDR regions.

``q25tok load`` (after a deploy's switch, and after switching back) copies every partition
of ``current/partitions/regions.tab`` into its no-map region through ``/dev/mem``;
``q25tok verify`` (in the smoke test) reads them back. The q25tok used is the one the caller
names: the image's, or a private copy of the release's own (:mod:`.trusted_q25tok`), never one
found in the install directory. Both refuse regions the running device tree does not
reserve (the image predates the build's reserved memory): like the device-tree check, a
warning, a failure with ``--strict``.

A load that read every region back records ``<boot id> <sha256 of the region table>`` in
``.q25deploy-loaded``; a later load in the same boot with the same table (an unchanged
redeploy, a tokenizer-only update) finds the regions already hold their partitions and
skips the copy. A reboot (another boot id) or another table loads again. ``status`` reports
that record as it is (:func:`held`: the regions are read back only without one, or when
asked, ``status --verify``) and never writes or removes it.

A deploy that has just received every partition file, each hashed by the board as it wrote
it, loads with ``--compare``: each chunk is read back as soon as it is written and compared
with the bytes written, not hashed a second time (the files are as proven as the quick smoke
test takes them to be). Any other load (a rollback, a reboot's reload, a release whose
partitions were linked from a kept one) hashes what it reads back.

A region that does not hold its partition is read once more (``q25tok verify --diff``, which
compares it with the release's partition file on the board: read through the same Device
memory accesses) for the byte ranges that differ; :func:`differing_tensors` names the first
tensors of the partition map those ranges fall in, with their byte ranges. A q25tok without
``--diff`` (an older image) reports the mismatch as before.
"""

from __future__ import annotations

from ...layout import REGION_TABLE as TABLE
from ..transport.become import hint as become_hint
from ..transport.boardbase import BoardSession

EXIT_REGION = 6  # q25tok: not reserved in the running device tree, or the bytes differ
# a deploy's load left to its smoke test, which runs it beside the forward pass (a load of
# partitions that deploy has just sent and proven: ``load --compare``); never reported as is
PENDING = {"state": "pending", "regions": []}


LOADED = ".q25deploy-loaded"
# $1 current, $2 the q25tok to run (the caller's choice), $3 load|verify, $4 region table,
# $5 memory, $6 device tree, $7 the loaded stamp ("-": none), $8 "read" when the stamp is only
# read (status: nothing is written or removed), $9 "--compare" or "-" (load only: each chunk
# read back and compared as it is written, not hashed). A stamp that cannot be written (a
# directory planted at its name) fails the load: it would otherwise fail silently
SCRIPT = r"""[ -f "$4" ] || { echo no-table; exit 0; }; q="$2"
if [ "$7" != - ]; then
  want="$(cat /proc/sys/kernel/random/boot_id 2>/dev/null) $(sha256sum < "$4" | cut -d" " -f1)"
  [ -f "$7" ] && [ ! -L "$7" ] && [ "$(cat "$7" 2>/dev/null)" = "$want" ] && { echo cached; exit 0; }
  if [ "$8" != read ] && { [ -e "$7" ] || [ -L "$7" ]; }; then rm -f "$7" || exit 1; fi
fi
if [ "$9" = --compare ]; then "$q" "$3" --compare --mem "$5" --dt "$6" "$4"; else "$q" "$3" --mem "$5" --dt "$6" "$4"; fi; st=$?
[ $st = 6 ] && "$q" verify --diff --mem "$5" --dt "$6" "$4" 2>/dev/null | grep '^differs '  # where (a newer q25tok)
if [ $st = 0 ] && [ "$7" != - ] && [ "$8" != read ]; then  # never through a planted name
  t=$(mktemp "$7.XXXXXX") && { echo "$want" > "$t" && mv -f "$t" "$7" || { rm -f "$t"; false; }; } ||
    { echo "q25tok: cannot write the load stamp $7" >&2; exit 1; }
fi
exit $st"""


def q25tok_argv(
    files,
    command: str,
    q25tok: str,
    *,
    memory: str,
    device_tree: str,
    stamp: str = "",
    compare: bool = False,
) -> list[str]:
    """``q25tok load|verify`` on ``current``'s region table through ``memory`` (``/dev/mem``),
    checked against ``device_tree``, as a board command (:func:`reported` reads its answer:
    per-region results; a load this boot already did: cached). ``stamp``: the load record's
    use, ``write`` (a load's default), ``read`` or ``none`` (a verify's default: the regions are
    read back whatever the record says). ``compare`` (a load of partition files this deploy has
    just sent and proven): ``load --compare``. Also run beside the smoke test's forward pass
    (:func:`~q25deploy.deploy.ops.forward_check.forward_beside_load`)."""
    cur = files.cur()
    stamp = stamp or ("write" if command == "load" else "none")
    path = "-" if stamp == "none" else files.path(LOADED)
    flag = "--compare" if compare and command == "load" else "-"
    return ["sh", "-c", SCRIPT, "sh", cur, q25tok, command, f"{cur}/{TABLE}", memory, device_tree, path, stamp, flag]


def _run(board: BoardSession, argv: list[str]) -> dict:
    status, out, err = board.run(argv, check=False, timeout=600)
    return reported(board, status, out, err)


def reported(board: BoardSession, status: int, out: bytes, err: bytes) -> dict:
    """What the command of :func:`q25tok_argv` printed, as per-region results and a state."""
    text = out.decode("utf-8", "replace")
    if text.strip() in ("no-table", "cached"):
        return {
            "state": "resident" if text.strip() == "cached" else "no-table",
            "regions": [],
            **({"cached": True} if text.strip() == "cached" else {}),
        }
    lines = text.splitlines()
    regions = [r for r in map(_region, lines) if r]
    _add_differs(regions, lines)
    if status == 0 and regions and all(r["state"] in ("loaded", "resident") for r in regions):
        state = "resident"
    elif status == EXIT_REGION and regions and all(r["state"] == "REFUSED" for r in regions):
        state = "not-reserved"
    elif status == 2 or (not regions and status in (126, 127)):
        state = "unsupported"  # a q25tok without load/verify, or none at all
    else:
        state = "failed"
    detail = "; ".join(
        f"{r['node']}: {r['state']} {r.get('detail', '')}".strip()
        for r in regions
        if r["state"] not in ("loaded", "resident")
    )
    if not regions or (state == "failed" and not detail):  # each loaded, then the stamp failed
        detail = (err or out).decode("utf-8", "replace").strip()[-200:]
    detail += become_hint(board.spec.user, board.become, detail)  # /dev/mem is root's
    return {"state": state, "regions": regions, "detail": detail}


def _region(line: str) -> dict | None:
    """One ``region <node> … <state> [sha256 <hex>] [detail]`` line of q25tok's report."""
    f = line.split()
    if len(f) < 3 or f[0] != "region":
        return None
    r = {
        "node": f[1],
        "state": next((w for w in ("loaded", "resident", "MISMATCH", "REFUSED", "FAILED") if w in f), "unknown"),
    }
    if "sha256" in f and f.index("sha256") + 1 < len(f):
        r["sha256"] = f[f.index("sha256") + 1]
    if r["state"] in ("REFUSED", "FAILED"):
        r["detail"] = line.split(r["state"], 1)[1].strip()
    return r


MAX_TENSORS = 3  # the first tensors named per region (the output stays one line)


def _add_differs(regions: list[dict], lines: list[str]) -> None:
    """``differs NODE 0xOFFSET LENGTH`` (or ``NODE more|tail …|unknown …|none …``) lines of
    ``q25tok verify --diff`` into their region's ``differs`` ([start, end) partition offsets)
    and ``differs_note``."""
    by_node = {r["node"]: r for r in regions}
    for line in lines:
        f = line.split()
        if len(f) < 3 or f[0] != "differs" or f[1] not in by_node:
            continue
        r = by_node[f[1]]
        try:
            start, n = int(f[2], 16), int(f[3])
            r.setdefault("differs", []).append([start, start + n])
        except (ValueError, IndexError):
            r.setdefault("differs_note", []).append(" ".join(f[2:])[:120])


def differing_tensors(region: dict, pmap: dict) -> str:
    """The first tensors (at most :data:`MAX_TENSORS`) whose bytes differ in ``region`` (a
    ``q25tok verify`` result with ``differs``), each with the byte range that differs in it
    (offsets in the tensor, inclusive, of its size); "" without ``--diff``'s ranges."""
    index = next((r["index"] for r in pmap.get("regions", []) if r.get("node") == region["node"]), None)
    tensors = sorted((t for t in pmap.get("tensors", []) if t.get("region") == index), key=lambda t: t["offset"])
    named: list[str] = []
    for start, end in region.get("differs", []):
        hit = False
        for t in tensors:
            lo, hi = max(start, t["offset"]), min(end, t["offset"] + t["bytes"])
            if lo < hi:
                hit = True
                named.append(f"{t['name']} bytes {lo - t['offset']}-{hi - 1 - t['offset']} of {t['bytes']}")
        if not hit:
            named.append(f"partition bytes {start}-{end - 1} (between tensors)")
    notes = region.get("differs_note", [])
    more = len(named) > MAX_TENSORS or "more" in notes
    text = "differs in " + ", ".join(named[:MAX_TENSORS]) + (", and more" if more else "") if named else ""
    return "; ".join(x for x in [text, *(n for n in notes if n != "more")] if x)


def load(board: BoardSession, files, q25tok: str, *, memory: str, device_tree: str, compare: bool = False) -> dict:
    return _run(board, q25tok_argv(files, "load", q25tok, memory=memory, device_tree=device_tree, compare=compare))


def verify(board: BoardSession, files, q25tok: str, *, memory: str, device_tree: str) -> dict:
    return _run(board, q25tok_argv(files, "verify", q25tok, memory=memory, device_tree=device_tree))


def held(board: BoardSession, files, q25tok: str, *, memory: str, device_tree: str, read_back: bool = False) -> dict:
    """What ``status`` reports of the regions: this boot's load record when it names the
    current region table (``cached``: not read again), else (or with ``read_back``) what
    ``q25tok verify`` reads back. Nothing on the board is written."""
    stamp = "none" if read_back else "read"
    return _run(board, q25tok_argv(files, "verify", q25tok, memory=memory, device_tree=device_tree, stamp=stamp))
