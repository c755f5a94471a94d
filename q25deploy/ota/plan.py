"""What an OTA artifact carries, from a build directory. Pure apart from reading the build.

The board side (``scripts/q25-ota.sh``) reads ``q25-plan``, a line-based file whose every
value was validated here (hex digests, plain relative paths, plain names), so the shell
never parses JSON from the artifact. A full release carries its ``release.json`` exactly as
``q25deploy deploy`` writes it (same id, same on-board layout); a tokenizer-only artifact
carries the new image and its manifest, and the board builds the new release from its
current one the way ``deploy --tokenizer-only`` does.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from .. import schema
from ..board.ota_settings import check_name
from ..common import stream_sha256
from ..deploy.state.release import release_from_build
from ..errors import DeployError, PackageError, SchemaError
from ..model import forward_expect
from ..model.record_compare import first_prompts
from ..tokenizer.prompts import SMOKE_PROMPTS

PLAN_NAME = "q25-plan"
PLAN_FORMAT = "q25-ota-plan 1"
TOKENIZER_FILES = ("tokenizer_runtime_image_manifest.json",)
# what the board script's line-based plan can carry: narrower than the schema's paths
_REL = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._+-]*(/[A-Za-z0-9_][A-Za-z0-9._+-]*)*")
_ABS = re.compile(r"(/[A-Za-z0-9_][A-Za-z0-9._+-]*)+")
_NODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9,._+@-]{0,126}")  # a device-tree node name, as the script checks it


@dataclass(frozen=True)
class PayloadFile:
    name: str  # flat name inside the artifact
    rel: str  # path inside the release directory ("" for files that are not release files)
    sha256: str
    size: int
    data: bytes | None = None
    path: Path | None = None


@dataclass(frozen=True)
class OtaPlan:
    mode: str  # "full" or "tokenizer"
    target: str
    build_release: str  # the build's release id (= the on-board release id of a full artifact)
    vocab_fingerprint: str
    install_dir: str
    q25tok: str
    image: str
    files: tuple[PayloadFile, ...]  # everything in the payload, q25-plan first
    regions: tuple[dict, ...] = ()  # full: the build's regions (node, base, size) the board must reserve
    allow_unreserved: bool = False  # the board installs a plan its device tree does not reserve (a warning)

    @property
    def artifact_name(self) -> str:
        kind = "release" if self.mode == "full" else "tokenizer"
        return f"q25-{self.target}-{kind}-{self.build_release}"

    @property
    def release_files(self) -> tuple[PayloadFile, ...]:
        return tuple(f for f in self.files if f.rel)


def _schema(check, value, where: str) -> str:
    try:
        return check(value, where, "")
    except SchemaError as e:
        raise PackageError(str(e).replace(": : ", ": ")) from None


def check_rel(rel: str, where: str) -> str:
    """A release path (schema's :func:`~q25deploy.schema.release_name`) the plan's lines can carry."""
    _schema(schema.release_name, rel, where)
    if not _REL.fullmatch(rel):
        raise PackageError(f"{where}: unsafe path {rel!r} (want a plain relative POSIX path)")
    return rel


def check_hex(value: str, where: str) -> str:
    return _schema(schema.hex64, value, where)


def check_abs(value: str, where: str) -> str:
    if not isinstance(value, str) or not _ABS.fullmatch(value) or ".." in value.split("/"):
        raise PackageError(f"{where}: {value!r} is not a plain absolute path")
    return value


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def flat_name(rel: str) -> str:
    return rel.replace("/", "__")


def smoke_expectations(ids: list[list[int]]) -> list[tuple[str, bytes, bool, list[int]]]:
    """(payload name, prompt, special, host ids) of every smoke prompt (``ids``: the host
    codec's, one list per prompt)."""
    return [
        (f"q25-smoke-{i}.txt", text, special, want)
        for i, ((text, special), want) in enumerate(zip(SMOKE_PROMPTS, ids, strict=True))
    ]


def region_lines(build_dir: Path, board=None) -> list[dict]:
    """The build's regions (its region table, checked against its partition map): what the
    board's running device tree must reserve before a full release is staged; with ``board``
    (its board file), each region ours there (:mod:`q25deploy.board.ours`)."""
    from ..board.ours import foreign
    from ..builddir import BuildDir

    try:
        rows = BuildDir(build_dir).check_region_table()
    except (SchemaError, OSError) as e:
        raise PackageError(f"{build_dir}: {e}") from None
    for r in rows:
        if not _NODE.fullmatch(str(r["node"])):
            raise PackageError(f"{build_dir}: region node {r['node']!r} is not a plain device-tree node name")
    why = foreign(board, rows) if board is not None else None
    if why:
        raise PackageError(f"{build_dir}: {why} (not a build for {board.name})")
    return [{"node": r["node"], "base": r["base"], "size": r["size"]} for r in rows]


def forward_payload(build_dir: Path, model_sha256: str | None, prompts: int | None = 1) -> bytes | None:
    """``q25-forward.txt`` (:mod:`..model.forward_expect`) from the build's forward record, its first
    ``prompts`` prompts (None: all), or None: a build without one (an older q25deploy, a model
    the forward pass cannot run), whose record is of another model than the release's, or
    ``prompts`` 0."""
    from ..builddir import BuildDir

    try:
        record = BuildDir(build_dir).forward_record
    except (SchemaError, OSError) as e:
        raise PackageError(f"{build_dir}: {e}") from None
    if record is None or record["model_sha256"] != model_sha256 or prompts == 0:
        return None
    if prompts is not None and prompts > len(record["prompts"]):
        raise PackageError(
            f"--forward {prompts}: {build_dir} recorded the forward pass on {len(record['prompts'])} smoke "
            f"prompt(s): build it again with --forward {prompts} (or all), or ask for fewer"
        )
    return forward_expect.render(first_prompts(record, prompts))


def plan_text(plan_lines: list[str]) -> bytes:
    return ("\n".join([PLAN_FORMAT, *plan_lines]) + "\n").encode()


def _release_payload(build_dir: Path, tokenizer_only: bool) -> tuple[dict, list[PayloadFile], bytes]:
    try:
        rel = release_from_build(build_dir)
    except DeployError as e:
        raise PackageError(str(e)) from None
    desc = json.loads(rel.description)
    files = []
    for f in rel.files:
        check_rel(f.rel, f"{build_dir}/manifest.json")
        check_hex(f.sha256, f"{build_dir}/manifest.json: {f.rel}")
        if tokenizer_only and f.rel not in (rel.image, *TOKENIZER_FILES):
            continue
        with f.open() as src:  # never through a symlink out of the build directory
            actual = stream_sha256(src)
        if actual != f.sha256:
            raise PackageError(
                f"{f.local}: sha256 {actual[:16]}… differs from the build manifest's "
                f"{f.sha256[:16]}… (rebuild with q25deploy build)"
            )
        files.append(PayloadFile(flat_name(f.rel), f.rel, f.sha256, f.size, path=f.local))
    return {"id": rel.id, "image": rel.image, **desc}, files, rel.description


def plan_package(
    build_dir: Path,
    *,
    target: str,
    install_dir: str,
    q25tok: str,
    smoke_ids: list[list[int]],
    tokenizer_only: bool = False,
    device_tree: str = "/proc/device-tree",
    memory: str = "/dev/mem",
    allow_unreserved: bool = False,
    board=None,
    forward_prompts: int | None = 1,
) -> OtaPlan:
    """The payload of an artifact for ``build_dir`` (validated; digests checked on disk);
    ``smoke_ids``: what the board's smoke test must give for each smoke prompt;
    ``device_tree``, ``memory``: the board's running device tree and physical memory (its
    board file's); ``allow_unreserved``: the board installs a full release whose regions its
    device tree does not reserve (a warning, like ``deploy --allow-unreserved``); ``board``: the
    board file, whose banks and reservations every region must respect; ``forward_prompts``: how
    many of the forward record's prompts the commit-time smoke runs the model on (None: all)."""
    regions = () if tokenizer_only else tuple(region_lines(build_dir, board))  # before hashing every file
    meta, files, description = _release_payload(build_dir, tokenizer_only)
    check_name(target, "target")
    _schema(schema.release_id, meta["id"], "release id")
    check_hex(meta["vocab_fingerprint"], f"{build_dir}/build.json: vocab_fingerprint")
    check_rel(meta["image"], f"{build_dir}/build.json: image")
    check_abs(install_dir, "install dir")
    check_abs(q25tok, "q25tok path")
    check_abs(device_tree, "device tree path")
    check_abs(memory, "memory device")
    for path, what in ((q25tok, "q25tok path"), (device_tree, "device tree path"), (memory, "memory device")):
        if PurePosixPath(install_dir) in PurePosixPath(path).parents or path == install_dir:
            raise PackageError(f"{what} {path!r} is inside the install dir {install_dir!r}")
    if PurePosixPath(q25tok).name != "q25tok":
        raise PackageError(f"q25tok path {q25tok!r}: the board runs it as root, so it must be a file named q25tok")
    names = [f.name for f in files]
    if len(set(names)) != len(names) or PLAN_NAME in names:
        raise PackageError(f"{build_dir}: release file names collide once flattened ({', '.join(sorted(names))})")
    mode = "tokenizer" if tokenizer_only else "full"
    lines = [
        f"mode {mode}",
        f"release {meta['id']}",
        f"target {target}",
        f"fingerprint {meta['vocab_fingerprint']}",
        f"install {install_dir}",
        f"q25tok {q25tok}",
        f"image {meta['image']}",
        f"device_tree {device_tree}",
        f"memory {memory}",
        f"unreserved {'allow' if allow_unreserved else 'refuse'}",
    ]
    lines += [f"region {r['node']} {r['base']:016x} {r['size']:016x}" for r in regions]
    lines += [f"file {f.sha256} {f.size} {f.name} {f.rel}" for f in files]
    extra: list[PayloadFile] = []
    if not tokenizer_only:
        extra.append(PayloadFile("release.json", "", _sha(description), len(description), data=description))
    for name, text, special, ids in smoke_expectations(smoke_ids):
        lines.append(f"smoke {name} {int(special)} {','.join(map(str, ids))}")
        extra.append(PayloadFile(name, "", _sha(text), len(text), data=text))
    expect = None if tokenizer_only else forward_payload(build_dir, meta.get("model_sha256"), forward_prompts)
    if expect is not None:
        lines.append(f"forward {forward_expect.NAME}")
        extra.append(PayloadFile(forward_expect.NAME, "", _sha(expect), len(expect), data=expect))
    plan = plan_text(lines)
    head = PayloadFile(PLAN_NAME, "", _sha(plan), len(plan), data=plan)
    return OtaPlan(
        mode,
        target,
        meta["id"],
        meta["vocab_fingerprint"],
        install_dir,
        q25tok,
        meta["image"],
        (head, *files, *extra),
        regions,
        allow_unreserved,
    )
