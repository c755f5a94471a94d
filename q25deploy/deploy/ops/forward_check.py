"""The smoke test's forward pass: the board runs Qwen2.5 (``q25tok generate --positions
--dump-layers``) on every smoke prompt and its forced continuation, one pass over the weights
it holds, and compares each reported position with the build's record there (``q25tok
compare``, the OTA commit's comparison too): the record goes with the command as the lines
``generate`` prints (:mod:`q25deploy.model.forward_expect`), so the board's one comparison
gives the verdict (docs/forward.md). The dump comes back too, for the tokens the report shows.

From DDR (``--mem``, through the reserved regions, Device memory) when the regions are
reserved (resident, or reserved but not as built: then the layer that goes wrong is named);
from the partition files (``--files``) otherwise, with a warning (a failure with ``strict``).
A difference beyond the record's tolerances fails the check and names the prompt, the step and
the first layer (or the embedding, the output head, the logits or the token) that differs; a
token that differs at a near tie (the host's top-two margin below
:data:`~q25deploy.model.record_compare.TOKEN_MARGIN`) is named in the check and compared past
(the inputs are forced: the contexts stay the same).
A q25tok without ``generate --positions`` (an older image) is a warning, a failure with ``strict``.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from typing import Protocol

from ...common import is_sha256
from ...layout import REGION_TABLE, TENSOR_TABLE
from ...model import forward_expect
from ...model.record_compare import parse_dump
from ..state.forward_known import forward_key
from ..state.residency import reported
from ..transport.boardbase import BoardSession

EXIT_USAGE = 2  # q25tok: an unknown command or option (an image older than generate --positions)
GENERATE_TIMEOUT = 3600  # seconds for every prompt: an A53 runs a 0.5B model at about a token a second
MARK = "@@q25-prompt-done"
VERDICT = "@@q25-compare"
LOADED = "@@q25-load"  # what the load beside the pass printed (forward_beside_load)
LOAD_ANSWER = re.compile(rb"^@@q25-load ([0-9]{1,3}) +([0-9]{1,15})\n", re.M)
# one prompt's answer: its dump, the marker, what q25tok compare printed, its status
ANSWER = re.compile(rf"(.*?){MARK}\n(.*?){VERDICT} (\d+)\n", re.S)
LAYER = re.compile(r"^(step \d+: layer (\d+))")


class Report(Protocol):
    strict: bool

    def check(self, name: str, ok: bool, detail: str = "", **extra) -> bool: ...

    def warn(self, name: str, msg: str) -> None: ...


def generate_script(
    q25tok: str, source: list[str], tables: list[str], steps: int, prompts: list[list[int]], beside: bool = False
) -> str:
    """One board command for every prompt (its ids and forced continuation), the record's lines
    on stdin (kept in a private temporary directory): each prompt's dump of its last ``steps``
    positions, a marker line, what ``q25tok compare`` printed and a line with its status; stops
    at the first generate that fails, with its status (what it printed on stderr tells why).
    ``beside``: the script's arguments are a command started first, in the background, and
    waited for on the way out, however the script ends: ``@@q25-load STATUS N``, then its
    stdout (N bytes) and its stderr."""
    head = [q25tok, "generate", *source, "--positions", str(steps), "--dump-layers", *tables]
    lines = ['d=$(mktemp -d "${TMPDIR:-/tmp}/q25fwd.XXXXXX") || exit 1']
    if beside:
        lines += [
            '"$@" > "$d/load.out" 2> "$d/load.err" & load=$!',
            "trap 'wait $load; lst=$?; echo \"" + LOADED + ' $lst $(wc -c < "$d/load.out")"; '
            'cat "$d/load.out" "$d/load.err"; rm -rf "$d"\' EXIT',
        ]
    else:
        lines.append("trap 'rm -rf \"$d\"' EXIT")
    lines.append('cat > "$d/expected" || exit 1')
    for i, ids in enumerate(prompts):
        gen = shlex.join([*head, *map(str, ids)])
        lines.append(f'{gen} > "$d/dump" || {{ st=$?; cat "$d/dump"; exit $st; }}; cat "$d/dump"; echo {MARK}')
        lines.append(f'{shlex.quote(q25tok)} compare "$d/expected" {i} "$d/dump"; echo "{VERDICT} $?"')
    return "\n".join(lines)


def forward_step(
    board: BoardSession,
    report: Report,
    cur: str,
    q25tok: str,
    record: dict,
    residency: dict,
    paths: dict[str, str],
    *,
    partition_map: dict,
    known: dict[str, str] | None,
    q25tok_sha256: str,
) -> dict | None:
    """The smoke test's forward pass, or, given ``known`` (the board state's passed passes:
    :func:`.forward_known.verified`), not where the same key passed from resident regions: one
    check says so. Returns the state's ``forward`` entry for a pass that passed (or was known to), else None; without
    ``known`` (``q25deploy smoke``: nothing is recorded) the pass always runs. ``q25tok_sha256``:
    the board's q25tok's digest as the smoke test's first command printed it (the key's)."""
    if known is None:
        check_forward(board, report, cur, q25tok, record, residency, paths)
        return None
    key = _key(partition_map, q25tok_sha256, record, residency)
    n = len(record["prompts"])
    # only regions that ``q25tok verify`` has just proven to hold these partitions stand for the
    # weights that passed; partition files a quick smoke did not hash again do not
    at = known.get(key) if key and residency.get("state") == "resident" else None
    if at:
        report.check(
            "forward pass",
            True,
            f"not run: these weights, this q25tok and this record passed it at release {at} "
            f"({n} prompt{'' if n == 1 else 's'}; q25deploy smoke runs it)",
        )
        return {"key": key, "prompts": n, "release": at}
    passed = check_forward(board, report, cur, q25tok, record, residency, paths)
    return {"key": key, "prompts": n} if passed and key else None


def _key(partition_map: dict, q25tok_sha256: str, record: dict, residency: dict) -> str | None:
    """The pass's key (:func:`.forward_known.forward_key`): from the regions when they were
    read back (holding the partitions, or not: then it ran from them), else from the files."""
    source = "mem" if residency.get("state") in ("resident", "failed") else "files"
    return forward_key(partition_map, q25tok_sha256, record, source) if is_sha256(q25tok_sha256) else None


def check_forward(
    board: BoardSession, report: Report, cur: str, q25tok: str, record: dict, residency: dict, paths: dict[str, str]
) -> bool:
    """Runs the forward pass on the board and adds one check per smoke prompt to ``report``
    (``record``: the build's forward record, already known to be of the board's model); True
    when it ran and every prompt passed."""
    tables = [posixpath.join(cur, REGION_TABLE), posixpath.join(cur, TENSOR_TABLE)]
    if residency.get("state") in ("resident", "failed"):
        source, where = ["--mem", paths["memory"], "--dt", paths["device_tree"]], "from the reserved regions"
    else:
        source, where = ["--files"], "from the partition files"
        report.warn("forward pass", FROM_FILES)
    expected = _expected(report, record)
    if expected is None:
        return False
    script = generate_script(
        q25tok, source, tables, record["steps"], [p["ids"] + p["forced"] for p in record["prompts"]]
    )
    status, out, err = board.run(["sh", "-c", script], stdin=expected, check=False, timeout=GENERATE_TIMEOUT)
    return _judge(report, record["prompts"], status, out.decode("utf-8", "replace"), err, where)


FROM_FILES = "forward pass run from the partition files: they are not in reserved memory"


def forward_beside_load(
    board: BoardSession,
    report: Report,
    cur: str,
    q25tok: str,
    record: dict,
    paths: dict[str, str],
    load_argv: list[str],
    *,
    partition_map: dict,
    known: dict[str, str] | None,
    q25tok_sha256: str,
) -> tuple[dict | None, dict]:
    """A deploy's load (``load_argv``: partition files it has just sent and proven, into their
    regions, each read back: :func:`.residency.q25tok_argv`) and the forward pass from those
    files, in one board command, side by side. Returns the state's
    ``forward`` entry for a pass that passed (with ``known``, as :func:`forward_step`: else
    None) and the regions' residency. When the load read every region back as written,
    the regions hold the very bytes the pass read: its checks say so. Regions the running tree
    does not reserve leave the pass from the files (a warning, as :func:`check_forward`); regions
    that differ from their partitions are checked again from the regions, which names the layer
    the difference reaches."""

    def alone() -> dict:  # the load without the pass
        return reported(board, *board.run(load_argv, check=False, timeout=GENERATE_TIMEOUT))

    expected = _expected(report, record)
    if expected is None:
        return None, alone()
    tables = [posixpath.join(cur, REGION_TABLE), posixpath.join(cur, TENSOR_TABLE)]
    prompts = [p["ids"] + p["forced"] for p in record["prompts"]]
    script = generate_script(q25tok, ["--files"], tables, record["steps"], prompts, beside=True)
    status, out, err = board.run(
        ["sh", "-c", script, "sh", *load_argv], stdin=expected, check=False, timeout=GENERATE_TIMEOUT
    )
    m = LOAD_ANSWER.search(out)
    if m is None:  # the script stopped before it started the load: the load runs now, alone
        residency = alone()
    else:
        rest = out[m.end() :]
        n = int(m.group(2))
        residency = reported(board, int(m.group(1)), rest[:n], rest[n:])
        out = out[: m.start()]
    state = residency.get("state")
    if state == "failed":
        passed = check_forward(board, report, cur, q25tok, record, residency, paths)
    else:
        if state == "resident":
            where = "from the partition files, which the reserved regions hold (loaded beside it, each read back)"
        else:
            where = "from the partition files"
            report.warn("forward pass", FROM_FILES)
        passed = _judge(report, record["prompts"], status, out.decode("utf-8", "replace"), err, where)
    key = _key(partition_map, q25tok_sha256, record, residency)
    return (
        {"key": key, "prompts": len(record["prompts"])} if passed and key and known is not None else None
    ), residency


def _expected(report: Report, record: dict) -> bytes | None:
    """The record as ``q25tok compare`` reads it, or None with a failed check (a record the
    comparison cannot read: this board's failure, in one line)."""
    try:
        return forward_expect.render(record)
    except Exception as e:
        report.check("forward pass", False, f"cannot compare with the build's forward record: {type(e).__name__}: {e}")
        return None


def _judge(report: Report, prompts: list[dict], status: int, text: str, err: bytes, where: str) -> bool:
    """The forward script's answer (:func:`generate_script`) as one check per prompt."""
    why = err.decode("utf-8", "replace").strip()
    if status == EXIT_USAGE and "usage" in why and MARK not in text:
        report.warn("forward pass", f"forward pass not run: this q25tok has no generate --positions ({why[-80:]})")
        return False
    answers = [(m.group(1), m.group(2), int(m.group(3))) for m in ANSWER.finditer(text)]
    passed = True
    for i, prompt in enumerate(prompts):
        name = f"forward prompt {i}"
        if i >= len(answers):
            report.check(name, False, f"q25tok generate failed (exit {status}): {why[-160:] or 'no output'}")
            return False
        dump, verdict, code = answers[i]
        try:
            steps = parse_dump(dump)
        except ValueError as e:
            passed = report.check(name, False, f"q25tok generate printed {e}")
            continue
        got = [s["token"] for s in steps[: len(prompt["steps"])]]
        want = [s["token"] for s in prompt["steps"]]
        tokens = {"tokens": got, "expected": want}  # each position's prediction, the board's and the host's
        line = " ".join(verdict.split())
        if code == 11:  # q25tok compare: they differ, where
            detail = f"{_layer_name(line)}; board tokens {_ids(got)}, host {_ids(want)}"
            passed = report.check(name, False, detail, **tokens)
        elif code != 0:
            passed = report.check(
                name, False, f"q25tok compare failed (exit {code}): {why[-160:] or line or 'no output'}"
            )
        else:
            note = f" ({line}: compared past it)" if line else ""  # a near tie the host's margin allows
            detail = f"{len(prompt['steps'])} positions as the host {where}: tokens {_ids(got)}{note}"
            report.check(name, True, detail, **tokens)
    return passed


def _ids(tokens: list[int]) -> str:
    return " ".join(map(str, tokens)) or "none"


def _layer_name(line: str) -> str:
    """``step S: layer N: …`` with the tensors that compute layer N (what an accelerator
    engineer looks at): ``step S: layer N (blk.N.*): …``."""
    return LAYER.sub(r"\1 (blk.\2.*)", line, count=1)
