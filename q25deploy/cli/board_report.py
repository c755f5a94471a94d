"""The tables the board commands print: one row per board in the columns of its command, and
under each board the checks its smoke test made, one line each, failures first. What a
board said is escaped for the terminal (:func:`~q25deploy.common.printable`)."""

from __future__ import annotations

from ..common import printable

IDS = "encode prompt "  # the name of each prompt's ids check (deploy/ops/smoke.py): one line for all that pass


def _seconds(r) -> str:
    return "-" if r.seconds is None else f"{r.seconds:.1f}s"


def _smoke_word(r) -> str:
    return "-" if r.smoke is None else ("pass" if r.smoke["ok"] else "FAIL")


def _counts(r) -> str:
    checks = (r.smoke or {}).get("checks", [])
    failed = sum(1 for c in checks if not c["ok"])
    return f"{len(checks) - failed} passed" + (f", {failed} failed" if failed else "")


def check_lines(smoke: dict | None) -> list[str]:
    """A smoke test's checks, one line each: failures first, then warnings, then what passed
    (the prompts whose ids match the host's as one ``ids`` line)."""
    if not smoke:
        return []
    checks = smoke.get("checks", [])
    lines = [_line("FAIL", c) for c in checks if not c["ok"]]
    lines += [f"  warn {w}" for w in smoke.get("warnings", [])]
    ids = [c for c in checks if c["name"].startswith(IDS)]
    for c in checks:
        if not c["ok"]:
            continue
        if c["name"].startswith(IDS):
            if c is ids[0]:
                passed = sum(1 for i in ids if i["ok"])
                lines.append(f"  ok   ids  {passed} of {len(ids)} prompts: the board's ids are the host's")
            continue
        lines.append(_line("ok", c))
    return [printable(line) for line in lines]


def _line(mark: str, check: dict) -> str:
    name = check["name"].replace(IDS, "ids prompt ") if check["name"].startswith(IDS) else check["name"]
    detail = " ".join(str(check.get("detail") or "").split())
    return f"  {mark:<4} {name}" + (f"  {detail}" if detail else "")


def render_results(results: list, command: str) -> str:
    """The table of ``deploy``, ``smoke`` or ``rollback`` (``results``: HostResults), each
    board's checks under its row."""
    if command == "smoke":
        head = f"{'host':<28} {'ok':<4} {'release':<17} {'smoke':<6} {'checks':<20} {'time':>7} detail"
    elif command == "deploy":
        head = f"{'host':<28} {'ok':<4} {'release':<17} {'sent':>14} {'files':>5} {'smoke':<6} {'time':>7} detail"
    else:
        head = f"{'host':<28} {'ok':<4} {'release':<17} {'previous':<17} {'time':>7} detail"
    lines = [head]
    for r in results:
        detail = r.error or "; ".join(r.warnings)
        if command == "smoke" and r.smoke is not None:
            detail = "; ".join(r.warnings)  # why it failed: the FAIL lines under the row
        ok = "yes" if r.ok else ("stop" if getattr(r, "interrupted", False) else "NO")
        release = r.release or "-"
        if command == "smoke":
            row = f"{r.host:<28} {ok:<4} {release:<17} {_smoke_word(r):<6} {_counts(r):<20} {_seconds(r):>7} {detail}"
        elif command == "deploy":
            row = (
                f"{r.host:<28} {ok:<4} {release:<17} {r.bytes_sent:>14,} {r.files_sent:>5} {_smoke_word(r):<6} "
                f"{_seconds(r):>7} {detail}"
            )
        else:
            row = f"{r.host:<28} {ok:<4} {release:<17} {r.previous or '-':<17} {_seconds(r):>7} {detail}"
        lines.append(printable(row.rstrip()))
        lines += check_lines(r.smoke)
    stopped = sum(1 for r in results if not r.ok and getattr(r, "interrupted", False))
    failed = sum(1 for r in results if not r.ok) - stopped
    lines.append(
        f"{len(results) - failed - stopped} of {len(results)} host(s) ok"
        + (f", {failed} failed" if failed else "")
        + (f", {stopped} interrupted" if stopped else "")
    )
    lines += release_notes(results)
    return "\n".join(lines)


def release_notes(results: list) -> list[str]:
    """A line for each release id that is not the build's own (the id `package` names its artifact
    by): what this deploy added to the build's files, since a release id covers every file it holds."""
    pairs = {(r.release, r.build_release) for r in results if r.build_release and r.release != r.build_release}
    return [
        f"release {rid} is build release {bid} (the id of `q25deploy package`'s artifact) with what this "
        "deploy adds (--runtime-bin's q25tok, or the board's partitions under --tokenizer-only): "
        "a release id covers every file it holds (docs/ota.md)"
        for rid, bid in sorted(pairs)
    ]


#: the status table's columns after the host and their widths (each at least its widest value:
#: residency's states are resident, not-reserved, unsupported and failed)
STATUS_COLUMNS = (("ok", 4), ("current", 17), ("previous", 17), ("reserved", 8), ("residency", 12))


def render_status(results: list[dict]) -> str:
    """The status table, with a header as deploy's has: ``reserved`` whether the live device
    tree reserves the current plan, ``residency`` whether its regions hold the partitions."""

    def row(host: str, values: list[str], detail: str) -> str:
        cells = " ".join(f"{v:<{w}}" for v, (_, w) in zip(values, STATUS_COLUMNS))
        return printable(f"{host:<28} {cells} {detail}".rstrip())

    lines = [row("host", [name for name, _ in STATUS_COLUMNS], "detail")]
    for r in results:
        if "error" in r:
            lines.append(row(r["host"], ["NO", "-", "-", "-", "-"], r["error"]))
            continue
        current = r["current"] or ("image" if r.get("image") else "-")
        reserved = "-" if "reserved" not in r else ("yes" if r["reserved"] else "NO")
        detail = [] if r["consistent"] else ["state and current link disagree"]
        if r.get("image"):
            detail.append(f"the image's own assets (model {r['image']['model_sha256'][:12]})")
        if r.get("reserved") is False:
            detail.append("unreserved: " + ", ".join(f"{u['node']} {u['why']}" for u in r["unreserved"]))
        if r.get("residency_by") == "load record":
            detail.append("regions as loaded this boot, not read back (--verify)")
        if fw := (r.get("release") or {}).get("forward"):  # the weights' last forward pass (not run here)
            at = f" at {fw['release']}" if fw.get("release") else ""
            detail.append(f"forward pass passed{at} ({fw['prompts']} prompt{'' if fw['prompts'] == 1 else 's'})")
        if r.get("svg"):
            detail.append(f"map {r['svg']}")
        values = [
            "yes" if r["consistent"] else "NO",
            current,
            r["previous"] or "-",
            reserved,
            r.get("residency") or "-",
        ]
        lines.append(row(r["host"], values, "; ".join(detail)))
    failed = sum(1 for r in results if "error" in r or not r["consistent"])
    lines.append(f"{len(results) - failed} of {len(results)} host(s) ok" + (f", {failed} failed" if failed else ""))
    return "\n".join(lines)
