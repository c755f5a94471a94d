"""q25tok ota's release.json and board state (ota_json.c) against q25deploy's own writers and
q25-ota.sh (before `q25tok ota` replaced it), whose reading and writing of them it replaces:
tests/runtime/ota_json_test.c under ASan+UBSan.

- release.json as q25deploy writes it (release._describe) parses, is written again byte for
  byte with the same id, and is what q25-ota.sh's write_release_json writes.
- Board states as q25deploy writes them (json_bytes of deployer._record's records, with and
  without a forward entry and deployed_at) parse as they are; ota_state_render writes what
  json_bytes writes for the state after a switch (q25-ota.sh's state_body).
- Each single defect is refused, and the state parser agrees with q25-ota.sh's awk
  state_valid (BusyBox's awk, the board's, and this machine's) on every file: hand-made defects
  and random mutations. Where the awk let through what q25deploy never writes (AWK_LOOSER),
  ota_json.c refuses.
"""

from __future__ import annotations

import json
import random
import re
import subprocess
from pathlib import Path

import pytest
from requirements import need_program

from q25deploy import layout, schema
from q25deploy.common import json_bytes, json_digest
from q25deploy.deploy.ops.deployer import _record
from q25deploy.deploy.state.release import Release, ReleaseFile, _describe
from q25deploy.packer.runtime import SANITIZE_FLAGS
from q25deploy.resources import runtime_sources

HERE = Path(__file__).resolve().parent
NOW = "2025-03-04T05:06:07Z"
VF = "5" * 63 + "a"
MODEL = "0123456789abcdef" * 4


@pytest.fixture(scope="module")
def exe(tmp_path_factory) -> Path:
    cc = need_program("cc", "Debian: gcc")
    src = runtime_sources()
    out = tmp_path_factory.mktemp("ota_json") / "ota_json_test"
    subprocess.run(
        [cc, "-std=c11", "-Wall", "-Wextra", "-Werror", *SANITIZE_FLAGS.split(), "-I", str(src), "-I", str(HERE)]
        + [str(HERE / "ota_json_test.c"), str(src / "ota_json.c"), str(src / "q25tok_sha256.c"), "-o", str(out)],
        check=True,
    )
    return out


def run(*cmd, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run([str(c) for c in cmd], capture_output=True, timeout=300, check=False)
    assert not check or r.returncode == 0, r.stdout.decode() + r.stderr.decode()
    return r


# q25-ota.sh as it was before `q25tok ota` replaced it (commit 81073f9): the awk program of its
# state_valid, the reader ota_state_parse replaces, and its release.json writer, verbatim
STATE_VALID_AWK = r"""
    function hex(v, n) { return length(v) == n + 2 && v ~ /^"[0-9a-f]+"$/ }
    function rel(v) {
        return v != "\"release.json\"" && v ~ /^"[A-Za-z0-9_][A-Za-z0-9._+-]*(\/[A-Za-z0-9_][A-Za-z0-9._+-]*)*"$/
    }
    function plain(v) { return length(v) <= 130 && v ~ /^"[A-Za-z0-9][A-Za-z0-9._+-]*"$/ }
    function fail() { bad = 1; exit 1 }
    function at(ind, key) { return substr(L[i], 1, length(ind) + length(key) + 4) == ind "\"" key "\": " }
    function take(ind, key,    v) {  # the value of line i, "KEY": VALUE at IND (sets comma)
        if (!at(ind, key)) fail()
        v = substr(L[i++], length(ind) + length(key) + 5)
        comma = v ~ /,$/; if (comma) v = substr(v, 1, length(v) - 1)
        return v
    }
    function files(id,    k) {
        do {
            k = L[i++]
            if (k !~ /^        ".*": \[$/) fail()
            k = substr(k, 9, length(k) - 11)
            if (!rel(k) || ((id, k) in seen)) fail()
            seen[id, k] = 1
            if (L[i] !~ /^          "[0-9a-f]+",$/ || !hex(substr(L[i], 11, length(L[i]) - 11), 64)) fail()
            i++
            if (L[i++] !~ /^          [0-9]+$/) fail()
            k = L[i++]
            if (k != "        ]," && k != "        ]") fail()
        } while (k == "        ],")
        if (L[i++] != "      },") fail()
    }
    function forward(    v) {  # the forward pass a deploy recorded (q25deploy/deploy/state/forward_known.py)
        v = take(I "  ", "key"); if (!hex(v, 64) || !comma) fail()
        v = take(I "  ", "prompts"); if (v !~ /^[0-9]+$/) fail()
        if (comma) { v = take(I "  ", "release"); if (!hex(v, 16) || comma) fail() }
        if (L[i++] != "      },") fail()
    }
    function record(id,    v) {
        if (at(I, "deployed_at")) { v = take(I, "deployed_at"); if (v !~ /^"[0-9TZ:.+-]*"$/ || !comma) fail() }
        v = take(I, "files")
        if (v == "{") files(id); else if (v != "{}" || !comma) fail()
        if (at(I, "forward")) { if (take(I, "forward") != "{") fail(); forward() }
        if (at(I, "image")) { v = take(I, "image"); if (!(v == "null" || rel(v)) || !comma) fail() }
        if (at(I, "model_sha256")) { v = take(I, "model_sha256"); if (!(v == "null" || hex(v, 64)) || !comma) fail() }
        if (at(I, "target")) { v = take(I, "target"); if (!(v == "null" || plain(v)) || !comma) fail() }
        v = take(I, "vocab_fingerprint"); if (!hex(v, 64) || comma) fail()
        v = L[i++]; if (v != "    }," && v != "    }") fail()
        return v == "    },"
    }
    { L[NR] = $0 }
    END {
        if (bad) exit 1
        I = "      "; i = 1
        if (L[i++] != "{") fail()
        cur = take("  ", "current"); if (!(cur == "null" || hex(cur, 16)) || !comma) fail()
        if (take("  ", "format") != "\"q25deploy-board-state/1\"" || !comma) fail()
        prev = take("  ", "previous"); if (!(prev == "null" || hex(prev, 16)) || !comma) fail()
        v = take("  ", "releases"); if (comma) fail()
        if (v == "{") {
            do {
                v = L[i++]
                if (v !~ /^    "[0-9a-f]+": \{$/) fail()
                id = substr(v, 5, length(v) - 7)
                if (!hex(id, 16) || (id in ids)) fail()
                ids[id] = 1
            } while (record(id))
            if (L[i++] != "  }") fail()
        } else if (v != "{}") fail()
        if (L[i++] != "}" || i <= NR) fail()
        if ((cur != "null" && !(cur in ids)) || (prev != "null" && !(prev in ids))) fail()
    }"""
WRITE_RELEASE_JSON = r"""write_release_json() {  # FILES-LIST(text) MODEL-JSON TARGET-JSON OUT -> prints the release id
    body=$(printf '%s\n' "$1" | awk -v fp="$FPR" -v model="$2" -v target="$3" '
        { f = f (NR > 1 ? ", " : "") "{\"path\": \"" $3 "\", \"sha256\": \"" $1 "\", \"size\": " $2 "}" }
        END { printf "{\"files\": [%s], \"format\": \"q25deploy-release/1\", \"model_sha256\": %s, \"target\": %s, \"vocab_fingerprint\": \"%s\"}", f, model, target, fp }')
    rid=$(printf '%s' "$body" | sha256sum | cut -c1-16)
    printf '%s\n' "$1" | awk -v fp="$FPR" -v model="$2" -v target="$3" -v rid="$rid" '
        BEGIN { print "{"; print "  \"files\": [" }
        { if (NR > 1) print "    },"; print "    {"; print "      \"path\": \"" $3 "\","
          print "      \"sha256\": \"" $1 "\","; print "      \"size\": " $2 }
        END { if (NR) print "    }"; print "  ],"; print "  \"format\": \"q25deploy-release/1\","
              print "  \"id\": \"" rid "\","; print "  \"model_sha256\": " model ","
              print "  \"target\": " target ","; print "  \"vocab_fingerprint\": \"" fp "\""; print "}" }' > "$4"
    echo "$rid"
}
"""


def awk_accepts(files: list[Path]) -> list[bool]:
    """state_valid on each file, under BusyBox's awk (the board's) and this machine's, which must agree."""
    awks = [[need_program("busybox", "Debian: busybox-static"), "awk"], [need_program("awk", "Debian: gawk")]]
    out = []
    for f in files:
        verdicts = {run(*a, STATE_VALID_AWK, f, check=False).returncode for a in awks}
        assert len(verdicts) == 1 and verdicts <= {0, 1}, (f, verdicts)
        out.append(verdicts == {0})
    return out


def c_verdicts(exe: Path, kind: str, files: list[Path]) -> list[str]:
    lines = run(exe, f"check-{kind}", *files).stdout.decode().splitlines()
    assert len(lines) == len(files)
    return lines


def release(files: list[tuple[str, str, int]], model: str | None, target: str | None, image: str = "") -> Release:
    """A release as q25deploy makes one (release._describe)."""
    rf = [ReleaseFile(rel, sha, size, None) for rel, sha, size in files]
    rid, desc = _describe(rf, {"target": target, "model_sha256": model, "vocab_fingerprint": VF})
    return Release(rid, tuple(rf), desc, VF, image or "tokenizer.q25tokrt")


def sha(i: int) -> str:
    return f"{i:02x}" * 32


def full_files() -> list[tuple[str, str, int]]:
    parts = [f"partitions/region_{i:02d}.bin" for i in range(3)]
    rels = [layout.release_name(p) for p in layout.release_files(f"{layout.TOKENIZER_DIR}/tokenizer.q25tokrt", parts)]
    return [(rel, sha(i), 1000 + 4096 * i) for i, rel in enumerate([*rels, layout.RUNTIME_BIN])]


def odd_files(seed: int) -> list[tuple[str, str, int]]:
    """Nested paths of every allowed character, names that sort around '/', '.', '-', '_'
    (code point order, as sort_keys and sorted() have it), sizes 0 and 2**64 - 1."""
    rng = random.Random(seed)
    first, rest = "AZaz09_", "AZaz09_.+-"
    rels = {"a", "a.b", "a/b", "a-b", "a+b", "a_b", "A", "_", "Z/z", "a/b/c.d", "0", "9-"}
    while len(rels) < 40:
        parts = [
            rng.choice(first) + "".join(rng.choice(rest) for _ in range(rng.randrange(6)))
            for _ in range(rng.randrange(1, 4))
        ]
        rels.add("/".join(parts))
    sizes = [0, 1, 2**64 - 1, 2**32, 10**18]
    return [
        (rel, sha(rng.randrange(256)), sizes[i] if i < len(sizes) else rng.randrange(2**40))
        for i, rel in enumerate(sorted(rels, key=lambda r: rng.random()))
    ]


RELEASES = {
    "full": (full_files(), MODEL, "zcu102"),
    "full-null-model-and-target": (full_files(), None, None),
    "null-model": (full_files()[:2], None, "t" * 128),
    "null-target": (full_files()[:1], MODEL, None),
    "odd-paths": (odd_files(1), MODEL, "Board_1.2+x-y"),
    "no-file": ([], None, None),
}


@pytest.mark.parametrize("name", RELEASES)
def test_release_json_as_q25deploy_writes_it(exe, tmp_path, name):
    rel = release(*RELEASES[name])
    f = tmp_path / "release.json"
    f.write_bytes(rel.description)
    assert run(exe, "release", f).stdout == rel.description  # parsed, and written again as it was
    assert json.loads(rel.description)["id"] == rel.id
    files = "\n".join(f"{s} {z} {p}" for p, s, z in sorted(RELEASES[name][0]))
    if files:  # q25-ota.sh's writer: the same bytes, the same id (it cannot write a release of no file)
        model, target = (json.dumps(v) for v in RELEASES[name][1:])
        out = tmp_path / "sh.json"
        r = run("sh", "-c", f'FPR={VF}\n{WRITE_RELEASE_JSON}write_release_json "$@"', "sh", files, model, target, out)
        assert r.stdout.decode() == rel.id + "\n" and out.read_bytes() == rel.description


def with_forward(rec: dict, release_id: str | None) -> dict:
    fw = {"key": sha(0x7E), "prompts": 3, **({"release": release_id} if release_id else {})}
    return {**rec, "forward": fw}


def states() -> dict[str, dict]:
    a, b, c = (release(*RELEASES[n]) for n in ("full", "null-model", "odd-paths"))
    ra, rb, rc = _record(a, NOW), _record(b, "2024-12-31T23:59:59Z"), _record(c, NOW)
    many = [release(full_files()[: i + 1], None, f"t{i}") for i in range(9)]
    base = {"format": schema.STATE_FORMAT}
    return {
        "none": {**base, "current": None, "previous": None, "releases": {}},
        "one": {**base, "current": a.id, "previous": None, "releases": {a.id: ra}},
        "two": {**base, "current": b.id, "previous": a.id, "releases": {a.id: ra, b.id: rb}},
        "two-forward": {
            **base,
            "current": a.id,
            "previous": b.id,
            "releases": {a.id: with_forward(ra, b.id), b.id: with_forward(rb, None)},
        },
        "no-deployed-at-null-image": {
            **base,
            "current": c.id,
            "previous": None,
            "releases": {c.id: {**{k: v for k, v in rc.items() if k != "deployed_at"}, "image": None}},
        },
        "sparse-records": {  # what parse_state lets a record leave out, and a record of no file
            **base,
            "current": a.id,
            "previous": c.id,
            "releases": {
                a.id: {"files": ra["files"], "vocab_fingerprint": VF},
                c.id: {"deployed_at": "", "files": {}, "vocab_fingerprint": VF},
            },
        },
        "three": {
            **base,
            "current": c.id,
            "previous": a.id,
            "releases": {a.id: with_forward(ra, None), b.id: rb, c.id: with_forward(rc, c.id)},
        },
        "many": {  # more records than one allocation holds
            **base,
            "current": many[3].id,
            "previous": many[7].id,
            "releases": {r.id: _record(r, NOW) for r in many},
        },
    }


ODD_PATHS = {"no-deployed-at-null-image", "sparse-records", "three"}  # a record of odd_files


def test_states_as_q25deploy_writes_them(exe, tmp_path):
    files = []
    for name, st in states().items():
        if name not in ODD_PATHS:  # q25deploy's own reader takes it (its release names are narrower)
            schema.parse_state(st, name)
        f = tmp_path / f"{name}.json"
        f.write_bytes(json_bytes(st))
        files.append(f)
        lines = run(exe, "state", f).stdout.decode().splitlines()
        assert lines[:2] == [f"current {st['current'] or '-'}", f"previous {st['previous'] or '-'}"]
        assert lines[2:] == [
            f"{rid} {rec.get('deployed_at') or '-'} {rec.get('image') or '-'} {rec['vocab_fingerprint']}"
            for rid, rec in sorted(st["releases"].items())
        ]
    assert awk_accepts(files) == [True] * len(files)
    assert c_verdicts(exe, "states", files) == ["ok"] * len(files)


@pytest.mark.parametrize("prev_at,prev_image", [("", ""), ("2024-01-01T00:00:00Z", "sub/tok.q25tokrt")])
def test_state_render_is_json_bytes_of_the_switch(exe, tmp_path, prev_at, prev_image):
    """The state after a switch to NEW from PREV (q25-ota.sh's state_body): NEW's record deployed
    now with the install's image, PREV's with its own deployed_at and image (now and
    tokenizer.q25tokrt when the old state had none), as deployer._record writes records."""
    rels = [
        release(*RELEASES[n], image=i)
        for n, i in (("full", "tokenizer.q25tokrt"), ("null-model", "x.q25tokrt"), ("no-file", "y"))
    ]
    paths = []
    for i, r in enumerate(rels):
        paths.append(tmp_path / f"r{i}.json")
        paths[-1].write_bytes(r.description)
    outs = []
    for ni, new in enumerate(rels):
        for pi, prev in [(None, None), *enumerate(rels)]:
            args = [paths[ni], NOW, new.image] + ([paths[pi], prev_at, prev_image] if prev else [])
            got = run(exe, "render", *args).stdout
            recs = {new.id: _record(new, NOW)}
            if prev and prev.id != new.id:
                recs[prev.id] = {**_record(prev, prev_at or NOW), "image": prev_image or "tokenizer.q25tokrt"}
            want = {
                "format": schema.STATE_FORMAT,
                "current": new.id,
                "previous": prev.id if prev else None,
                "releases": recs,
            }
            assert got == json_bytes(want), (ni, pi)
            outs.append(tmp_path / f"s{len(outs)}.json")
            outs[-1].write_bytes(got)
    assert awk_accepts(outs) == [True] * len(outs)
    assert c_verdicts(exe, "states", outs) == ["ok"] * len(outs)


@pytest.mark.parametrize("arch", ["host", "aarch64", "armhf"])
def test_own_checks(exe, tmp_path, arch):
    """ota_json_test.c's own checks: here under ASan+UBSan, on aarch64 (the board) and with a
    32-bit size_t (armhf) under QEMU."""
    if arch == "host":
        r = run(exe)
    else:
        cross, qemu, libs = {
            "aarch64": ("aarch64-linux-gnu-gcc", "qemu-aarch64", "/usr/aarch64-linux-gnu"),
            "armhf": ("arm-linux-gnueabihf-gcc", "qemu-arm", "/usr/arm-linux-gnueabihf"),
        }[arch]
        cc = need_program(cross, f"Debian: gcc-{cross.removesuffix('-gcc')}")
        emu = need_program(qemu, "Debian: qemu-user")
        src, out = runtime_sources(), tmp_path / "ota_json_test"
        subprocess.run(
            [cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-O2", "-I", str(src), "-I", str(HERE)]
            + [str(HERE / "ota_json_test.c"), str(src / "ota_json.c"), str(src / "q25tok_sha256.c"), "-o", str(out)],
            check=True,
        )
        r = run(emu, "-L", libs, out)
    assert r.stdout.decode().endswith(" passed, 0 failed\n")


# -- single defects -------------------------------------------------------------------------------
def reid(text: str) -> str:
    """The id the mutated content would have (so that only the defect is wrong), where it is JSON."""
    try:
        d = json.loads(text)
        body = {k: v for k, v in d.items() if k != "id"}
        return text.replace(d["id"], json_digest(body)[:16])
    except (ValueError, KeyError, TypeError, AttributeError):
        return text


def swap_lines(text: str, a: str, b: str) -> str:
    lines = text.split("\n")
    i = next(n for n, line in enumerate(lines) if line.startswith(a))
    j = next(n for n, line in enumerate(lines) if line.startswith(b))
    lines[i], lines[j] = lines[j], lines[i]
    return "\n".join(lines)


def sub1(pattern: str, repl: str):
    def f(t: str) -> str:
        out, n = re.subn(pattern, repl, t, count=1, flags=re.M)
        assert n == 1, pattern
        return out

    return f


RELEASE_DEFECTS = {
    "key out of order": lambda t: swap_lines(t, '  "format"', '  "id"'),
    "file keys out of order": lambda t: swap_lines(t, '      "path"', '      "sha256"'),
    "files out of order": lambda t: reid(
        re.sub(r'("path": ")([^"]+)(".*?"path": ")([^"]+)"', r'\1\4\3\2"', t, count=1, flags=re.S)
    ),
    "wrong indent": sub1(r'^  "format"', '   "format"'),
    "tab indent": sub1(r'^  "target"', '\t"target"'),
    "upper-case sha256": lambda t: reid(t.replace(sha(10), sha(10).upper())),
    "upper-case vocab_fingerprint": lambda t: reid(t.replace(VF, VF.upper())),
    "upper-case id": lambda t: re.sub(
        r'("id": ")([0-9a-f]*?)([a-f])', lambda m: m[1] + m[2] + m[3].upper(), t, count=1
    ),
    "path with ..": lambda t: reid(sub1(r'"path": "partitions/', '"path": "partitions/../')(t)),
    "hidden path": lambda t: reid(sub1(r'"path": "partitions/', '"path": ".partitions/')(t)),
    "absolute path": lambda t: reid(sub1(r'"path": "partitions/', '"path": "/partitions/')(t)),
    "empty path": lambda t: reid(sub1(r'"path": "[^"]*"', '"path": ""')(t)),
    "path release.json": lambda t: reid(sub1(r'"path": "q25tok"', '"path": "release.json"')(t)),
    "escaped path": lambda t: reid(sub1(r'"path": "q25tok"', r'"path": "q25to\\u006b"')(t)),
    "duplicate path": lambda t: reid(sub1(r'"path": "q25tok"', '"path": "partitions/regions.tab"')(t)),
    "trailing garbage line": lambda t: t + "x\n",
    "trailing blank line": lambda t: t + "\n",
    "missing final newline": lambda t: t[:-1],
    "CRLF": lambda t: t.replace("\n", "\r\n"),
    "huge size": lambda t: reid(sub1(r'"size": \d+', '"size": 18446744073709551616')(t)),
    "negative size": lambda t: reid(sub1(r'"size": \d+', '"size": -1')(t)),
    "size with a leading zero": sub1(r'"size": (\d+)', r'"size": 0\1'),
    "size as a string": lambda t: reid(sub1(r'"size": (\d+)', r'"size": "\1"')(t)),
    "short id": lambda t: re.sub(r'("id": ")(.)', r"\1", t, count=1),
    "other format": lambda t: reid(t.replace("q25deploy-release/1", "q25deploy-release/2")),
    "extra key": lambda t: reid(sub1(r'^  "format"', '  "extra": 1,\n  "format"')(t)),
    "missing target": lambda t: reid(sub1(r'^  "target": .*\n', "")(t)),
    "target too long": lambda t: reid(t.replace('"target": "zcu102"', '"target": "' + "z" * 129 + '"')),
    "target not plain": lambda t: reid(t.replace('"target": "zcu102"', '"target": "_zcu102"')),
    "model not hex": lambda t: reid(t.replace(MODEL, MODEL[:-1] + "g")),
    "model the string null": lambda t: reid(t.replace(f'"{MODEL}"', '"null"')),
    "compact": lambda t: reid(json.dumps(json.loads(t), sort_keys=True) + "\n"),
    "non-ascii target": lambda t: reid(t.replace('"target": "zcu102"', '"target": "zcü102"')),
}


def write_defects(tmp_path: Path, good: str, defects: dict) -> list[Path]:
    """A file a defect: each of them a change of GOOD."""
    files = []
    for i, (name, mutate) in enumerate(defects.items()):
        bad = mutate(good)
        assert bad != good, name
        files.append(tmp_path / f"d{i}.json")
        files[-1].write_bytes(bad.encode())
    return files


def test_release_json_defects_are_refused(exe, tmp_path):
    files = write_defects(tmp_path, release(*RELEASES["full"]).description.decode(), RELEASE_DEFECTS)
    for (name, _), verdict in zip(RELEASE_DEFECTS.items(), c_verdicts(exe, "releases", files), strict=True):
        assert verdict.startswith("refused"), name
        assert "its id" not in verdict, (name, verdict)


def nth_line(text: str, prefix: str, n: int = 0) -> int:
    return [i for i, line in enumerate(text.split("\n")) if line.startswith(prefix)][n]


def on_line(prefix: str, f, n: int = 0):
    def g(t: str) -> str:
        lines = t.split("\n")
        i = nth_line(t, prefix, n)
        lines[i] = f(lines[i])
        return "\n".join(lines)

    return g


FILE_KEY = '        "'
STATE_DEFECTS = {
    "key out of order": lambda t: swap_lines(t, '  "current"', '  "format"'),
    "record keys out of order": lambda t: swap_lines(t, '      "image"', '      "model_sha256"'),
    "forward keys out of order": lambda t: swap_lines(t, '        "key"', '        "prompts"'),
    "wrong indent": on_line('      "image"', lambda s: " " + s),
    "upper-case file sha256": lambda t: re.sub(
        r'^( {10}"[0-9]*)([a-f])', lambda m: m[1] + m[2].upper(), t, count=1, flags=re.M
    ),
    "upper-case vocab_fingerprint": on_line('      "vocab_fingerprint"', lambda s: s.replace("a", "A")),
    "upper-case release id": on_line('    "', lambda s: s.upper().replace('": {', '": {')),
    "path with ..": on_line(FILE_KEY, lambda s: s.replace('"', '"../', 1)),
    "path release.json": on_line(FILE_KEY, lambda s: re.sub(r'"[^"]+"', '"release.json"', s, count=1)),
    "duplicate path": lambda t: on_line(FILE_KEY, lambda s: t.split("\n")[nth_line(t, FILE_KEY, 0)], 1)(t),
    "duplicate release": lambda t: duplicate_release(t),
    "current not among releases": on_line('  "current"', lambda s: s[:14] + "0" * 16 + '",'),
    "previous not among releases": on_line('  "previous"', lambda s: s[:15] + "0" * 16 + '",'),
    "trailing garbage line": lambda t: t + "x\n",
    "trailing blank line": lambda t: t + "\n",
    "missing final newline": lambda t: t[:-1],
    "CRLF": lambda t: t.replace("\n", "\r\n"),
    "huge size": on_line("          1", lambda s: "          18446744073709551616"),
    "size with a leading zero": on_line("          1", lambda s: "          0" + s.strip()),
    "negative size": on_line("          1", lambda s: "          -" + s.strip()),
    "other format": lambda t: t.replace("board-state/1", "board-state/2"),
    "deployed_at not a time": on_line('      "deployed_at"', lambda s: s.replace("T", " ")),
    "image absolute": on_line('      "image"', lambda s: s.replace('": "', '": "/')),
    "image empty": on_line('      "image"', lambda s: re.sub(r'": ".*"', '": ""', s)),
    "target not plain": on_line('      "target": "', lambda s: s.replace('": "', '": "_')),
    "target too long": on_line('      "target": "', lambda s: re.sub(r'": ".*"', '": "' + "t" * 129 + '"', s)),
    "model the string null": on_line('      "model_sha256": "', lambda s: re.sub(r'": ".*"', '": "null"', s)),
    "forward release and a comma": on_line('        "release"', lambda s: s + ","),
    "forward release null": on_line('        "release"', lambda s: '        "release": null'),
    "forward key upper-case": on_line('        "key"', lambda s: s.upper().replace('"KEY"', '"key"')),
    "forward prompts a string": on_line('        "prompts"', lambda s: s.replace(": ", ': "').replace(",", '",')),
    "files brace and comma": on_line('      "files": {', lambda s: s + ","),
    "forward brace and comma": on_line('      "forward": {', lambda s: s + ","),
    "missing vocab_fingerprint": lambda t: sub1(r',\n      "vocab_fingerprint": .*', "")(t),
    "extra key": on_line('      "image"', lambda s: '      "extra": 1,\n' + s),
    "releases last but with a comma": on_line('  "releases"', lambda s: s + ","),
    "tab indent": on_line('  "previous"', lambda s: "\t" + s.lstrip()),
    "long deployed_at": on_line('      "deployed_at"', lambda s: s.replace("Z", "Z" + "0" * 30)),
}
# what q25-ota.sh's awk let through although q25deploy never writes it: ota_json.c refuses these
AWK_LOOSER = {
    "missing final newline",
    "huge size",
    "size with a leading zero",
    "files brace and comma",
    "forward brace and comma",
    "long deployed_at",
}


def awk_looser(text: bytes) -> bool:
    """A text only the awk takes (AWK_LOOSER's kinds), by what it holds."""
    t = text.decode("latin-1")
    if not t.endswith("\n"):
        return True
    for line in t.split("\n"):
        if line in ('      "files": {,', '      "forward": {,'):
            return True
        m = re.fullmatch(r' {10}([0-9]+)|        "prompts": ([0-9]+),?', line)
        if m and (int(d := m[1] or m[2]) >= 2**64 or (d != "0" and d.startswith("0"))):
            return True
        m = re.fullmatch(r'      "deployed_at": "(.*)",|      "image": "(.*)",', line)
        if m and len(m[1] or m[2] or "") > (39 if m[1] is not None else 1023):
            return True
    return False


def duplicate_release(text: str) -> str:
    """The id of a release neither current nor previous replaced by the current one's."""
    d = json.loads(text)
    spare = next(r for r in d["releases"] if r not in (d["current"], d["previous"]))
    return text.replace(f'\n    "{spare}": {{\n', f'\n    "{d["current"]}": {{\n')


def state_base() -> str:
    return json_bytes(states()["three"]).decode()


def test_state_defects_are_refused_as_state_valid_refuses_them(exe, tmp_path):
    files = write_defects(tmp_path, state_base(), STATE_DEFECTS)
    awk, c = awk_accepts(files), c_verdicts(exe, "states", files)
    for name, f, by_awk, by_c in zip(STATE_DEFECTS, files, awk, c, strict=True):
        assert by_c == "refused", name
        assert by_awk == (name in AWK_LOOSER), name
        assert awk_looser(f.read_bytes()) == (name in AWK_LOOSER), name


def mutations(text: str, rng: random.Random, n: int) -> list[str]:
    """Random single mutations of a state: a line dropped, doubled, moved by one, or one
    character changed, added or removed (from the characters the format has, and others)."""
    chars = ' ",:{}[]0123456789abcdefABTZ.-_/\\\r\tnul'
    out = []
    while len(out) < n:
        lines = text.split("\n")
        i = rng.randrange(len(lines))
        op = rng.randrange(6)
        if op == 0:
            del lines[i]
        elif op == 1:
            lines.insert(i, lines[i])
        elif op == 2 and i + 1 < len(lines):
            lines[i], lines[i + 1] = lines[i + 1], lines[i]
        else:
            line = lines[i]
            j = rng.randrange(len(line) + 1)
            c = rng.choice(chars)
            lines[i] = line[:j] + (c if op != 5 else "") + line[j + (op != 4) :]
        m = "\n".join(lines)
        if m != text:
            out.append(m)
    return out


@pytest.mark.parametrize("name", ["two-forward", "three", "sparse-records", "none", "many"])
def test_random_state_mutations_agree_with_state_valid(exe, tmp_path, name):
    good = json_bytes(states()[name]).decode()
    files = []
    for i, m in enumerate(mutations(good, random.Random(name), 150)):
        files.append(tmp_path / f"m{i}.json")
        files[-1].write_bytes(m.encode())
    awk, c = awk_accepts(files), c_verdicts(exe, "states", files)
    for f, by_awk, by_c in zip(files, awk, c, strict=True):
        text = f.read_bytes()
        if by_c == "ok":
            assert by_awk, text
        else:
            assert not by_awk or awk_looser(text), text
    assert c.count("ok") < len(c)
