"""The one way q25deploy reads a JSON file that crossed a trust boundary, and the checks on
every value in it (see docs/security.md).

Documents: a build directory's ``manifest.json``, ``build.json``, ``partition_map.json``,
``smoke_ids.json``, ``probe_digests.json``, ``forward_record.json`` and the text ``partitions/regions.tab`` (read through :class:`q25deploy.builddir.BuildDir`), a board's ``release.json``,
``.q25deploy-state.json`` and its intent record, the tokenizer cache's ``assets.json``,
the plan cache's entries and a build directory's incremental-build stamp. Each ``parse_*`` takes the decoded JSON and
the file's name, returns the checked value and raises :class:`~q25deploy.errors.SchemaError`
naming the file and the field. Values: sha256 digests are 64 lower-case hex digits, sizes
ints >= 0, release ids 16 hex digits, paths relative POSIX with no empty, ``.`` or ``..``
part and names from the set their kind allows.

Hand-written, standard library only: the rules are about paths and names, which a schema
library would need custom validators for anyway, and importing it would slow every command.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from . import layout
from .common import is_sha256
from .errors import SchemaError

# the formats of the files whose writers live above this module (they import these names)
SMOKE_IDS_FORMAT = "q25deploy-smoke-ids/1"  # tokenizer/prompts.py: smoke_ids.json
PROBE_FORMAT = "q25deploy-probe-digests-1"  # packer/probe.py: probe_digests.json
PROBE_UNSUPPORTED = "unsupported"  # a probe digest of a ggml type q25_dequantize does not know

MAX_JSON = 64 << 20  # a partition map of a 7B model is a few MB
MAX_STAMP = 1 << 20  # a build's stamp: its inputs and what the quick check watches (a few KB)
_RELEASE_ID = re.compile(r"[0-9a-f]{16}")
_PART = re.compile(r"[A-Za-z0-9_%@+,=~][A-Za-z0-9._%@+,=~-]{0,254}")  # one path component; never . or ..
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._+-]{0,127}")  # a plain file name (no hidden files)
_PARTITION = re.compile(r"partitions/region_[0-9]{2,4}\.bin")
_NODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9,._+@-]{0,127}")  # a device-tree node name
#: every region q25deploy reserves is named ``q25-region<N>@<base in lower-case hex>``
#: (board/plan.py): a node of another name (a remoteproc carve-out, a PL DMA buffer) is
#: another owner's memory however it is reserved, and so is one named for another base
#: (``q25tok load`` on the board applies the same rule)
NODE_PREFIX = "q25-region"
_OURS = re.compile(re.escape(NODE_PREFIX) + r"(?:0|[1-9][0-9]{0,3})@([0-9a-f]{1,16})")
BUILD_FILES = frozenset(
    {
        layout.BUILD_INFO,
        layout.PARTITION_MAP,
        *layout.TABLES,
        layout.MEMORY_HEADER,
        layout.DTSI,
        layout.SVG,
        layout.UBOOT_SCRIPT,
        layout.SMOKE_IDS,
        layout.PROBE_DIGESTS,
        layout.FORWARD_RECORD,
        layout.HPARAMS,
    }
)
LAYER_DIR = "meta-q25"
RELEASE_JSON = "release.json"


def _fail(where: str, field: str, problem: str) -> SchemaError:
    return SchemaError(f"{where}: {field}: {problem}" if field else f"{where}: {problem}")


# -- values --------------------------------------------------------------------------------------
def _expect(ok: bool, v: Any, where: str, field: str, what: str):
    """``v`` when ``ok``, else the one-line error naming the file, the field and what was expected."""
    if not ok:
        raise _fail(where, field, f"{v!r:.80} is not {what}")
    return v


def obj(v: Any, where: str, field: str = "") -> dict:
    if not isinstance(v, dict):
        raise _fail(where, field, f"expected an object, got {type(v).__name__}")
    return v


def array(v: Any, where: str, field: str) -> list:
    if not isinstance(v, list):
        raise _fail(where, field, f"expected a list, got {type(v).__name__}")
    return v


def hex64(v: Any, where: str, field: str) -> str:
    return _expect(is_sha256(v), v, where, field, "a sha256 (64 lower-case hex digits)")


def size(v: Any, where: str, field: str) -> int:
    return _expect(type(v) is int and v >= 0, v, where, field, "a size (an integer >= 0)")


def release_id(v: Any, where: str, field: str) -> str:
    return _expect(
        isinstance(v, str) and bool(_RELEASE_ID.fullmatch(v)),
        v,
        where,
        field,
        "a release id (16 lower-case hex digits)",
    )


def name(v: Any, where: str, field: str) -> str:
    return _expect(
        isinstance(v, str) and bool(_NAME.fullmatch(v)), v, where, field, "a plain name ([A-Za-z0-9._+-], not hidden)"
    )


def rel_path(v: Any, where: str, field: str) -> str:
    """A relative POSIX path: not absolute, no empty, ``.`` or ``..`` part, no hidden or odd names."""
    if not isinstance(v, str) or not v or v.startswith("/") or not all(_PART.fullmatch(p) for p in v.split("/")):
        raise _fail(where, field, f"unsafe path {v!r:.120} (want a plain relative POSIX path)")
    return v


def abs_path(v: Any, where: str, field: str) -> str:
    if not isinstance(v, str) or not v.startswith("/") or v == "/" or not rel_path(v[1:], where, field):
        raise _fail(where, field, f"{v!r:.120} is not a plain absolute path")
    return v


def build_path(v: Any, where: str, field: str) -> str:
    """A file a build directory may hold: the fixed names, ``tokenizer/NAME``, a partition, the layer."""
    rel_path(v, where, field)
    top, _, rest = v.partition("/")
    if (
        v in BUILD_FILES
        or _PARTITION.fullmatch(v)
        or (top == layout.TOKENIZER_DIR and _NAME.fullmatch(rest))
        or (top == LAYER_DIR and rest)
    ):
        return v
    raise _fail(where, field, f"{v!r:.120} is not a file a build directory holds")


def release_name(v: Any, where: str, field: str) -> str:
    """A file inside ``releases/<id>/`` on a board: a plain name or a partition."""
    if (
        isinstance(v, str)
        and v != RELEASE_JSON
        and (_NAME.fullmatch(v) or _PARTITION.fullmatch(v) or v in layout.TABLES)
    ):
        return v
    raise _fail(where, field, f"{v!r:.120} is not a release file name")


def optional(check, v: Any, where: str, field: str):
    return None if v is None else check(v, where, field)


# -- documents -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Artifact:
    path: str
    kind: str
    sha256: str
    size: int


def parse_manifest(doc: Any, where: str) -> dict[str, Artifact]:
    out: dict[str, Artifact] = {}
    for i, a in enumerate(array(obj(doc, where).get("artifacts"), where, "artifacts")):
        f = f"artifacts[{i}]"
        a = obj(a, where, f)
        path = build_path(a.get("path"), where, f"{f}.path")
        if path in out:
            raise _fail(where, f"{f}.path", f"{path} is listed twice")
        out[path] = Artifact(
            path,
            name(a.get("kind"), where, f"{f}.kind"),
            hex64(a.get("sha256"), where, f"{f}.sha256"),
            size(a.get("size"), where, f"{f}.size"),
        )
    return out


@dataclass(frozen=True)
class BuildInfo:
    target: str
    model_sha256: str
    image_path: str  # in the build directory: tokenizer/NAME
    image_name: str  # NAME: its name in a release
    install_dir: str
    vocab_fingerprint: str
    raw: dict  # the whole document, for people (not trusted beyond the fields above)


def region_node_ours(node: Any, base: Any) -> bool:
    """Whether ``node`` is the name q25deploy gives its region at ``base`` (see :data:`NODE_PREFIX`)."""
    m = _OURS.fullmatch(node) if isinstance(node, str) else None
    return m is not None and type(base) is int and int(m.group(1), 16) == base


def _ours(node: Any, base: Any, where: str, field: str) -> None:
    if not region_node_ours(node, base):
        raise _fail(
            where,
            field,
            f"{node!r:.80} is not a q25deploy region ({NODE_PREFIX}<N>@<its base in hex>): another "
            "owner's reserved memory is never written",
        )


def parse_build_info(doc: Any, where: str) -> BuildInfo:
    d = obj(doc, where)
    model, image = obj(d.get("model"), where, "model"), obj(d.get("image"), where, "image")
    path = build_path(image.get("path"), where, "image.path")
    if not path.startswith(layout.TOKENIZER_DIR + "/"):
        raise _fail(where, "image.path", f"{path!r} is not under {layout.TOKENIZER_DIR}/")
    return BuildInfo(
        name(d.get("target"), where, "target"),
        hex64(model.get("sha256"), where, "model.sha256"),
        path,
        layout.release_name(path),
        abs_path(image.get("install_dir"), where, "image.install_dir"),
        hex64(image.get("vocab_fingerprint"), where, "image.vocab_fingerprint"),
        d,
    )


def parse_partition_map(doc: Any, where: str) -> dict:
    """A build's (or a board's) ``partition_map.json``: every field its readers use (the smoke
    test, ``status --svg``'s memory plan) is there and of its kind."""
    d = obj(doc, where)
    indexes = set()
    for i, r in enumerate(array(d.get("regions"), where, "regions")):
        f = f"regions[{i}]"
        r = obj(r, where, f)
        index = size(r.get("index"), where, f"{f}.index")
        if index in indexes:
            raise _fail(where, f"{f}.index", f"region {index} is listed twice")
        indexes.add(index)
        if r.get("file") != layout.partition_file(index):
            raise _fail(where, f"{f}.file", f"{r.get('file')!r:.120} is not {layout.partition_file(index)}")
        hex64(r.get("sha256"), where, f"{f}.sha256")
        for k in ("base", "size", "used"):
            size(r.get(k), where, f"{f}.{k}")
        name(r.get("bank"), where, f"{f}.bank")
        if not isinstance(r.get("node"), str) or not _NODE.fullmatch(r["node"]):
            raise _fail(where, f"{f}.node", f"{r.get('node')!r:.80} is not a device-tree node name")
        _ours(r["node"], r["base"], where, f"{f}.node")
    for i, t in enumerate(array(d.get("tensors"), where, "tensors")):
        f = f"tensors[{i}]"
        t = obj(t, where, f)
        name(t.get("name"), where, f"{f}.name"), name(t.get("type"), where, f"{f}.type")
        for k in ("bytes", "source_offset", "offset"):
            size(t.get(k), where, f"{f}.{k}")
        _expect(
            t.get("region") in indexes and type(t.get("region")) is int,
            t.get("region"),
            where,
            f"{f}.region",
            "the index of a region",
        )
        shape = array(t.get("shape"), where, f"{f}.shape")
        _expect(all(type(n) is int and n >= 0 for n in shape), shape, where, f"{f}.shape", "a list of sizes")
    return d


def parse_release(doc: Any, where: str) -> dict:
    """A board's ``releases/<id>/release.json``."""
    d = obj(doc, where)
    release_id(d.get("id"), where, "id")
    hex64(d.get("vocab_fingerprint"), where, "vocab_fingerprint")
    optional(hex64, d.get("model_sha256"), where, "model_sha256")
    optional(name, d.get("target"), where, "target")
    for i, f in enumerate(array(d.get("files"), where, "files")):
        f = obj(f, where, f"files[{i}]")
        release_name(f.get("path"), where, f"files[{i}].path")
        hex64(f.get("sha256"), where, f"files[{i}].sha256")
        size(f.get("size"), where, f"files[{i}].size")
    return d


ASSETS_FORMAT = "q25deploy-assets/1"


def parse_assets_manifest(doc: Any, where: str, install_dir: str) -> dict:
    """The ``assets_manifest.json`` an image's q25-model-assets package installs (the layer's
    release: ``q25deploy build`` writes it into the layer) as a board state's release record:
    ``files`` {name: [sha256, size]} (every path a release file directly under
    ``install_dir``), ``vocab_fingerprint``, ``model_sha256``, ``target``."""
    d = obj(doc, where)
    if d.get("format") != ASSETS_FORMAT:
        raise _fail(where, "format", f"{d.get('format')!r:.60} is not {ASSETS_FORMAT}")
    files: dict[str, list] = {}
    for i, f in enumerate(array(d.get("files"), where, "files")):
        f = obj(f, where, f"files[{i}]")
        path = abs_path(f.get("path"), where, f"files[{i}].path")
        rel = path[len(install_dir) + 1 :] if path.startswith(install_dir.rstrip("/") + "/") else ""
        release_name(rel, where, f"files[{i}].path")
        if rel in files:
            raise _fail(where, f"files[{i}].path", f"{path} is listed twice")
        files[rel] = [
            hex64(f.get("sha256"), where, f"files[{i}].sha256"),
            size(f.get("size"), where, f"files[{i}].size"),
        ]
    model = obj(d.get("model"), where, "model")
    return {
        "files": files,
        "vocab_fingerprint": hex64(d.get("vocab_fingerprint"), where, "vocab_fingerprint"),
        "model_sha256": hex64(model.get("sha256"), where, "model.sha256"),
        "target": name(d.get("target"), where, "target"),
    }


STATE_FORMAT = "q25deploy-board-state/1"
INTENT_FORMAT = "q25deploy-board-intent/1"


def parse_state(doc: Any, where: str) -> dict:
    """A board's ``.q25deploy-state.json``: current, previous and a record per kept release."""
    d = obj(doc, where)
    if d.get("format") != STATE_FORMAT:
        raise _fail(where, "format", f"{d.get('format')!r:.60} is not {STATE_FORMAT}")
    releases = obj(d.get("releases"), where, "releases")
    for key in ("current", "previous"):
        if optional(release_id, d.get(key), where, key) and d[key] not in releases:
            raise _fail(where, key, f"{d[key]} has no record under releases")
    for rid, rec in releases.items():
        release_id(rid, where, "releases")
        f = f"releases.{rid}"
        rec = obj(rec, where, f)
        files = obj(rec.get("files"), where, f"{f}.files")
        for rel, entry in files.items():
            release_name(rel, where, f"{f}.files")
            if not isinstance(entry, list) or len(entry) != 2:
                raise _fail(where, f"{f}.files.{rel}", "expected [sha256, size]")
            hex64(entry[0], where, f"{f}.files.{rel}"), size(entry[1], where, f"{f}.files.{rel}")
        hex64(rec.get("vocab_fingerprint"), where, f"{f}.vocab_fingerprint")
        optional(hex64, rec.get("model_sha256"), where, f"{f}.model_sha256")
        optional(name, rec.get("target"), where, f"{f}.target")
        optional(release_name, rec.get("image"), where, f"{f}.image")
        if not isinstance(rec.get("deployed_at", ""), str):
            raise _fail(where, f"{f}.deployed_at", "expected a string")
        if "forward" in rec:  # the forward pass this release passed (deploy/state/forward_known.py)
            fw = obj(rec["forward"], where, f"{f}.forward")
            hex64(fw.get("key"), where, f"{f}.forward.key"), size(fw.get("prompts"), where, f"{f}.forward.prompts")
            optional(release_id, fw.get("release"), where, f"{f}.forward.release")
    return d


def parse_intent(doc: Any, where: str) -> dict:
    """The record a board gets before ``current`` is switched: the state that holds after it."""
    d = obj(doc, where)
    if d.get("format") != INTENT_FORMAT:
        raise _fail(where, "format", f"{d.get('format')!r:.60} is not {INTENT_FORMAT}")
    state = parse_state(d.get("state"), f"{where} (state)")
    if release_id(d.get("current"), where, "current") != state.get("current"):
        raise _fail(where, "current", "differs from the recorded state's")
    return d


def parse_asset_index(doc: Any, where: str) -> list[dict]:
    """The tokenizer cache's ``assets.json``: [{path, kind, sha256}], plain file names, not empty."""
    if not array(doc, where, ""):
        raise _fail(where, "", "lists no asset")
    for i, a in enumerate(doc):
        a = obj(a, where, f"[{i}]")
        name(a.get("path"), where, f"[{i}].path"), name(a.get("kind"), where, f"[{i}].kind")
        hex64(a.get("sha256"), where, f"[{i}].sha256")
    return doc


PAYLOAD_DIGESTS_FORMAT = "q25deploy-payload-digests/1"


def parse_payload_digests(doc: Any, where: str) -> tuple[dict[str, str], dict[str, list[str]]]:
    """The payload-digest cache's entry for one model: (tensor name -> sha256, plan key ->
    [partition sha256], oldest plan first)."""
    d = obj(doc, where)
    if d.get("format") != PAYLOAD_DIGESTS_FORMAT:
        raise _fail(where, "format", f"{d.get('format')!r:.60} is not {PAYLOAD_DIGESTS_FORMAT}")
    tensors = obj(d.get("tensors"), where, "tensors")
    for k, v in tensors.items():
        hex64(v, where, f"tensors[{k!r:.80}]")
    plans = {}
    for i, e in enumerate(array(d.get("partitions"), where, "partitions")):
        e = obj(e, where, f"partitions[{i}]")
        shas = array(e.get("sha256"), where, f"partitions[{i}].sha256")
        for j, sha in enumerate(shas):
            hex64(sha, where, f"partitions[{i}].sha256[{j}]")
        plans[hex64(e.get("plan"), where, f"partitions[{i}].plan")] = shas
    return tensors, plans


PLAN_CACHE_FORMAT = "q25deploy-plan-cache/1"


def parse_plan_cache(doc: Any, where: str) -> tuple[str, str, dict[str, Artifact], list[list[str]]]:
    """A plan-cache entry (q25deploy/packer/plan_cache.py): (its key, the model's sha256, the
    build's artifacts as its manifest lists them, the groups of hard-linked artifacts)."""
    d = obj(doc, where)
    if d.get("format") != PLAN_CACHE_FORMAT:
        raise _fail(where, "format", f"{d.get('format')!r:.60} is not {PLAN_CACHE_FORMAT}")
    artifacts = parse_manifest(d, where)
    seen: set[str] = set()
    groups = []
    for i, g in enumerate(array(d.get("links"), where, "links")):
        group = array(g, where, f"links[{i}]")
        _expect(len(group) >= 2, group, where, f"links[{i}]", "two or more paths")
        for j, rel in enumerate(group):
            f = f"links[{i}][{j}]"
            _expect(rel in artifacts and rel not in seen, rel, where, f, "an artifact in no other group")
            seen.add(rel)
        first = artifacts[group[0]]
        _expect(
            all((artifacts[r].sha256, artifacts[r].size) == (first.sha256, first.size) for r in group),
            group[0],
            where,
            f"links[{i}]",
            "paths of the same bytes",
        )
        groups.append(list(group))
    return hex64(d.get("key"), where, "key"), hex64(d.get("model_sha256"), where, "model_sha256"), artifacts, groups


def _quick(v: Any, where: str, field: str) -> dict:
    """A quick record (q25deploy/packer/quick.py: what a build read): its snapshot is compared
    whole, never trusted; its plugin failures ([plugin, error] each) are reported again."""
    quick = obj(v, where, field)
    obj(quick.get("snapshot"), where, f"{field}.snapshot")
    watch = array(quick.get("watch"), where, f"{field}.watch")
    _expect(all(isinstance(p, str) for p in watch), watch, where, f"{field}.watch", "a list of paths")
    failures = array(quick.get("failures"), where, f"{field}.failures")
    _expect(
        all(isinstance(f, list) and len(f) == 2 and all(isinstance(x, str) for x in f) for f in failures),
        failures,
        where,
        f"{field}.failures",
        "a list of [plugin, error]",
    )
    return quick


def parse_stamp(doc: Any, where: str) -> dict:
    """A build directory's incremental-build stamp (``.q25deploy-stamp.json``,
    q25deploy/packer/pipeline.py): ``inputs`` (compared whole with the build's own), ``keys``
    {stage: content key}, the ``model_sha256`` the build was made from (a cache path part
    only as 64 lower-case hex digits) and the optional ``quick`` record."""
    d = obj(doc, where)
    obj(d.get("inputs"), where, "inputs")
    for stage, key in obj(d.get("keys"), where, "keys").items():
        hex64(key, where, f"keys.{name(stage, where, 'keys')}")
    hex64(d.get("model_sha256"), where, "model_sha256")
    if "quick" in d:
        _quick(d["quick"], where, "quick")
    return d


def parse_smoke_ids(doc: Any, where: str) -> tuple[str, list[tuple[bytes, bool, list[int]]]]:
    """A build's ``smoke_ids.json``: (the image's sha256, [(prompt, special, ids)])."""
    d = obj(doc, where)
    if d.get("format") != SMOKE_IDS_FORMAT:
        raise _fail(where, "format", f"{d.get('format')!r:.60} is not {SMOKE_IDS_FORMAT}")
    cases = []
    for i, c in enumerate(array(d.get("prompts"), where, "prompts")):
        f = f"prompts[{i}]"
        c = obj(c, where, f)
        text = _expect(isinstance(c.get("text"), str), c.get("text"), where, f"{f}.text", "a string")
        special = _expect(type(c.get("special")) is bool, c.get("special"), where, f"{f}.special", "true or false")
        ids = array(c.get("ids"), where, f"{f}.ids")
        _expect(all(type(t) is int and 0 <= t < 1 << 32 for t in ids), ids, where, f"{f}.ids", "a list of token ids")
        cases.append((text.encode("utf-8", "surrogatepass"), special, ids))
    return hex64(d.get("image_sha256"), where, "image_sha256"), cases


_TENSOR_NAME = re.compile(r"[A-Za-z0-9._-]{1,63}")  # q25_tensor_table_next's rule


def parse_probe_digests(doc: Any, where: str) -> dict:
    """A build's ``probe_digests.json`` (:mod:`q25deploy.packer.probe`): the token ids the board's
    probe is given and, per tensor, its ggml type name and digest (or ``unsupported``). Names
    and types are what the board prints, so they are held to the tensor table's rules."""
    d = obj(doc, where)
    if d.get("format") != PROBE_FORMAT:
        raise _fail(where, "format", f"{d.get('format')!r:.60} is not {PROBE_FORMAT}")
    hex64(d.get("model_sha256"), where, "model_sha256")
    ids = array(d.get("ids"), where, "ids")
    _expect(all(type(t) is int and 0 <= t < 1 << 32 for t in ids) and len(ids) <= 4096, ids, where, "ids", "token ids")
    seen = set()
    for i, t in enumerate(array(d.get("tensors"), where, "tensors")):
        f = f"tensors[{i}]"
        t = obj(t, where, f)
        n = t.get("name")
        _expect(
            isinstance(n, str) and bool(_TENSOR_NAME.fullmatch(n)) and n not in seen,
            n,
            where,
            f"{f}.name",
            "a new tensor name",
        )
        seen.add(n)
        name(t.get("type"), where, f"{f}.type")
        if t.get("digest") != PROBE_UNSUPPORTED:
            hex64(t.get("digest"), where, f"{f}.digest")
    return d


def _token(v: Any, where: str, field: str) -> int:
    return _expect(type(v) is int and 0 <= v < 1 << 32, v, where, field, "a token id")


def _real(v: Any, where: str, field: str) -> float | None:
    """A float32 value as JSON writes it: a number, or null for a non-finite one."""
    return _expect(v is None or (type(v) in (int, float) and abs(v) < 3.5e38), v, where, field, "a float32 or null")


def _state(v: Any, where: str, field: str) -> dict:
    d = obj(v, where, field)
    _real(d.get("norm"), where, f"{field}.norm")
    vals = array(d.get("values"), where, f"{field}.values")
    _expect(len(vals) == 4, vals, where, f"{field}.values", "4 values")
    for j, x in enumerate(vals):
        _real(x, where, f"{field}.values[{j}]")
    return d


def _forward_step(st: Any, where: str, f: str, n_layers: int | None) -> int:
    """One step of a forward record; its number of layers (the same in every step)."""
    st = obj(st, where, f)
    size(st.get("position"), where, f"{f}.position")
    tok = _token(st.get("token"), where, f"{f}.token")
    top = array(st.get("top"), where, f"{f}.top")
    _expect(
        0 < len(top) <= 5 and all(isinstance(t, list) and len(t) == 2 for t in top), top, where, f"{f}.top", "5 pairs"
    )
    for j, (i, v) in enumerate(top):
        _token(i, where, f"{f}.top[{j}]"), _real(v, where, f"{f}.top[{j}]")
    _expect(top[0][0] == tok, tok, where, f"{f}.token", "the first of top")
    _real(st.get("margin"), where, f"{f}.margin")
    _state(st.get("embd"), where, f"{f}.embd"), _state(st.get("output"), where, f"{f}.output")
    layers = array(st.get("layers"), where, f"{f}.layers")
    _expect(n_layers in (None, len(layers)) and bool(layers), len(layers), where, f"{f}.layers", "a state per layer")
    for j, x in enumerate(layers):
        _state(x, where, f"{f}.layers[{j}]")
    return len(layers)


def parse_forward_record(doc: Any, where: str) -> dict:
    """A build's ``forward_record.json`` (docs/forward.md): per smoke prompt, the ids fed, the
    continuation forced after them, the reference's token at each reported position and per
    step the top logits and the states' summaries."""
    d = obj(doc, where)
    if d.get("format") != layout.FORWARD_RECORD_FORMAT:
        why = f"{d.get('format')!r:.60} is not {layout.FORWARD_RECORD_FORMAT}"
        raise _fail(where, "format", f"{why} (an older q25deploy's build? build it again)")
    hex64(d.get("model_sha256"), where, "model_sha256")
    steps: int = _expect(
        type(d.get("steps")) is int and 1 <= d["steps"] <= 64, d.get("steps"), where, "steps", "a step count (1..64)"
    )
    idx = array(d.get("summary_indices"), where, "summary_indices")
    _expect(len(idx) == 4 and all(type(i) is int and i >= 0 for i in idx), idx, where, "summary_indices", "4 indices")
    n_layers = None
    for i, c in enumerate(array(d.get("prompts"), where, "prompts")):
        f = f"prompts[{i}]"
        c = obj(c, where, f)
        _expect(isinstance(c.get("text"), str), c.get("text"), where, f"{f}.text", "a string")
        _expect(type(c.get("special")) is bool, c.get("special"), where, f"{f}.special", "true or false")
        ids = array(c.get("ids"), where, f"{f}.ids")
        _expect(0 < len(ids) <= 4096, len(ids), where, f"{f}.ids", "1..4096 ids")
        for j, t in enumerate(ids):
            _token(t, where, f"{f}.ids[{j}]")
        more = array(c.get("forced"), where, f"{f}.forced")
        _expect(len(more) == steps - 1, len(more), where, f"{f}.forced", f"{steps - 1} ids (one fewer than the steps)")
        _expect(len(ids) + len(more) <= 4096, len(more), where, f"{f}.forced", "at most 4096 ids with the prompt's")
        for j, t in enumerate(more):
            _token(t, where, f"{f}.forced[{j}]")
        run = array(c.get("steps"), where, f"{f}.steps")
        _expect(len(run) == steps, len(run), where, f"{f}.steps", f"{steps} steps")
        for s, st in enumerate(run):
            n_layers = _forward_step(st, where, f"{f}.steps[{s}]", n_layers)
            at = st["position"]
            _expect(at == len(ids) - 1 + s, at, where, f"{f}.steps[{s}].position", f"{len(ids) - 1 + s} (ids and step)")
        tokens = array(c.get("tokens"), where, f"{f}.tokens")
        _expect(tokens == [st["token"] for st in run], tokens, where, f"{f}.tokens", "the steps' tokens")
    return d


MAX_REGION_TABLE = 64 << 10  # q25tok reads at most 64 regions of lines under 512 bytes
_TABLE_HEX = re.compile(r"0x[0-9a-f]{1,16}")


def parse_region_table(data: bytes, where: str) -> list[dict]:
    """A build's ``partitions/regions.tab`` (``NODE BASE SIZE FILE FILE_SIZE SHA256`` lines,
    ``#`` comments), checked as strictly as ``q25_region_table_parse`` on the board and by the
    build's own rules: NODE a device-tree node name, FILE a partition's plain name in
    ``partitions/``, BASE and SIZE hex multiples of 16, FILE_SIZE at most SIZE. Rows as in
    ``partition_map.json``: node, base, size, file (``partitions/...``), used, sha256."""
    if len(data) > MAX_REGION_TABLE:
        raise _fail(where, "", f"larger than {MAX_REGION_TABLE:,} bytes")
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise _fail(where, "", "not ASCII text") from None
    rows: list[dict] = []
    for n, line in enumerate(text.split("\n"), 1):
        f = line.split("#", 1)[0].split()
        if not f:
            continue
        field = f"line {n}"
        if len(line) >= 512 or len(f) != 6:
            raise _fail(where, field, "is not NODE BASE SIZE FILE FILE_SIZE SHA256")
        node, base, length, file, used, digest = f
        _expect(bool(_NODE.fullmatch(node)), node, where, f"{field} NODE", "a device-tree node name")
        file = _expect(
            _PARTITION.fullmatch(f"partitions/{file}") is not None,
            file,
            where,
            f"{field} FILE",
            "a partition's file name (region_NN.bin)",
        )
        for v, what in ((base, "BASE"), (length, "SIZE")):
            _expect(
                bool(_TABLE_HEX.fullmatch(v)) and int(v, 16) % 16 == 0,
                v,
                where,
                f"{field} {what}",
                "a hex multiple of 16",
            )
        _expect(
            used.isdigit() and used.isascii() and int(used) <= int(length, 16) and int(length, 16) > 0,
            used,
            where,
            f"{field} FILE_SIZE",
            "a byte count within SIZE",
        )
        hex64(digest, where, f"{field} SHA256")
        _ours(node, int(base, 16), where, f"{field} NODE")
        if len(rows) == 64:
            raise _fail(where, "", "more than 64 regions")
        rows.append(
            {
                "node": node,
                "base": int(base, 16),
                "size": int(length, 16),
                "file": f"partitions/{file}",
                "used": int(used),
                "sha256": digest,
            }
        )
    return rows


_TENSOR_LINE = re.compile(
    r"([A-Za-z0-9._-]{1,127}) (0|[1-9][0-9]{0,9}) ([A-Z][A-Z0-9_]{0,14}) (0|[1-9][0-9]{0,9}) "
    r"0x([0-9a-f]{1,16}) (0|[1-9][0-9]{0,19}) ([1-9][0-9]{0,19}(?:,[1-9][0-9]{0,19}){0,3})"
)


def parse_tensor_table(text: str, where: str) -> list[dict]:
    """A build's ``partitions/tensors.tab`` (text): one dict per tensor line, with the checks of
    the C reader (``q25_tensor_table_next``): number and name of a known type agree, its rows are
    whole blocks and its bytes the shape's, offset + bytes fits in 64 bits."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType  # only here: gguf is slow to import

    out: list[dict] = []
    for no, line in enumerate(text.split("\n"), 1):
        line = line.partition("#")[0].strip(" ")
        if not line:
            continue
        m = _TENSOR_LINE.fullmatch(line)
        if not m:
            raise _fail(where, f"line {no}", f"{line!r:.120} is not NAME TYPE TYPE_NAME REGION 0xOFFSET BYTES SHAPE")
        name_, qtype, qname, region, offset, nbytes, shape = m.groups()
        dims = [int(d) for d in shape.split(",")]
        start, size = int(offset, 16), int(nbytes)
        n = 1
        for d in dims:
            n *= d
        if start + size >= 1 << 64 or n >= 1 << 64:
            raise _fail(where, f"line {no}", "offset + bytes or the element count exceeds 64 bits")
        known = GGMLQuantizationType._value2member_map_.get(int(qtype))
        if known is not None and known in GGML_QUANT_SIZES:
            block, block_bytes = GGML_QUANT_SIZES[known]
            if known.name != qname or dims[0] % block or n // block * block_bytes != size:
                raise _fail(where, f"line {no}", f"{qname} (type {qtype}) of shape {shape} is not {nbytes} bytes")
        out.append(
            {
                "name": name_,
                "type": int(qtype),
                "type_name": qname,
                "region": int(region),
                "offset": start,
                "bytes": size,
                "shape": dims,
            }
        )
    return out


def loads(data: bytes | str, where: str) -> Any:
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as e:
        raise _fail(where, "", f"not JSON ({e})") from None
