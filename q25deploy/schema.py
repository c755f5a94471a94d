"""The one way q25deploy reads a JSON file that crossed a trust boundary, and the checks on
every value in it (see docs/security.md).

Documents: a build directory's ``manifest.json``, ``build.json`` and ``partition_map.json``
(:class:`BuildDir`), a board's ``release.json``, ``.q25deploy-state.json`` and its intent
record, and the tokenizer cache's ``assets.json``. Each ``parse_*`` takes the decoded JSON and
the file's name, returns the checked value and raises :class:`~q25deploy.errors.SchemaError`
naming the file and the field. Values: sha256 digests are 64 lower-case hex digits, sizes
ints >= 0, release ids 16 hex digits, paths relative POSIX with no empty, ``.`` or ``..``
part and names from the set their kind allows. Files of a build directory are opened one
component at a time with ``O_NOFOLLOW``: a symlink anywhere in the path is refused.

Hand-written, standard library only: the rules are about paths and names, which a schema
library would need custom validators for anyway, and importing it would slow every command.
"""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, BinaryIO

from .build import layout
from .errors import SchemaError

MAX_JSON = 64 << 20  # a partition map of a 7B model is a few MB
_HEX64 = re.compile(r"[0-9a-f]{64}")
_RELEASE_ID = re.compile(r"[0-9a-f]{16}")
_PART = re.compile(r"[A-Za-z0-9_%@+,=~][A-Za-z0-9._%@+,=~-]{0,254}")  # one path component; never . or ..
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._+-]{0,127}")  # a plain file name (no hidden files)
_PARTITION = re.compile(r"partitions/region_[0-9]{2,4}\.bin")
_NODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9,._+@-]{0,127}")  # a device-tree node name
BUILD_FILES = frozenset({layout.BUILD_INFO, layout.PARTITION_MAP, layout.REGION_TABLE, layout.MEMORY_HEADER,
                         layout.DTSI, layout.SVG})
LAYER_DIR = "meta-q25"
RELEASE_JSON = "release.json"


def _fail(where: str, field: str, problem: str) -> SchemaError:
    return SchemaError(f"{where}: {field}: {problem}" if field else f"{where}: {problem}")


# -- values --------------------------------------------------------------------------------------
def obj(v: Any, where: str, field: str = "") -> dict:
    if not isinstance(v, dict):
        raise _fail(where, field, f"expected an object, got {type(v).__name__}")
    return v


def array(v: Any, where: str, field: str) -> list:
    if not isinstance(v, list):
        raise _fail(where, field, f"expected a list, got {type(v).__name__}")
    return v


def hex64(v: Any, where: str, field: str) -> str:
    if not isinstance(v, str) or not _HEX64.fullmatch(v):
        raise _fail(where, field, f"{v!r:.80} is not a sha256 (64 lower-case hex digits)")
    return v


def size(v: Any, where: str, field: str) -> int:
    if type(v) is not int or v < 0:
        raise _fail(where, field, f"{v!r:.40} is not a size (an integer >= 0)")
    return v


def release_id(v: Any, where: str, field: str) -> str:
    if not isinstance(v, str) or not _RELEASE_ID.fullmatch(v):
        raise _fail(where, field, f"{v!r:.80} is not a release id (16 lower-case hex digits)")
    return v


def name(v: Any, where: str, field: str) -> str:
    if not isinstance(v, str) or not _NAME.fullmatch(v):
        raise _fail(where, field, f"{v!r:.80} is not a plain name ([A-Za-z0-9._+-], not hidden)")
    return v


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
    if v in BUILD_FILES or _PARTITION.fullmatch(v) or (top == layout.TOKENIZER_DIR and _NAME.fullmatch(rest)) \
            or (top == LAYER_DIR and rest):
        return v
    raise _fail(where, field, f"{v!r:.120} is not a file a build directory holds")


def release_name(v: Any, where: str, field: str) -> str:
    """A file inside ``releases/<id>/`` on a board: a plain name or a partition."""
    if isinstance(v, str) and v != RELEASE_JSON and (_NAME.fullmatch(v) or _PARTITION.fullmatch(v)
                                                     or v == layout.REGION_TABLE):
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
        out[path] = Artifact(path, name(a.get("kind"), where, f"{f}.kind"),
                             hex64(a.get("sha256"), where, f"{f}.sha256"), size(a.get("size"), where, f"{f}.size"))
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


def parse_build_info(doc: Any, where: str) -> BuildInfo:
    d = obj(doc, where)
    model, image = obj(d.get("model"), where, "model"), obj(d.get("image"), where, "image")
    path = build_path(image.get("path"), where, "image.path")
    if not path.startswith(layout.TOKENIZER_DIR + "/"):
        raise _fail(where, "image.path", f"{path!r} is not under {layout.TOKENIZER_DIR}/")
    return BuildInfo(name(d.get("target"), where, "target"), hex64(model.get("sha256"), where, "model.sha256"),
                     path, layout.release_name(path), abs_path(image.get("install_dir"), where, "image.install_dir"),
                     hex64(image.get("vocab_fingerprint"), where, "image.vocab_fingerprint"), d)


def parse_partition_map(doc: Any, where: str) -> dict:
    d = obj(doc, where)
    for i, r in enumerate(array(d.get("regions"), where, "regions")):
        f = f"regions[{i}]"
        r = obj(r, where, f)
        index = size(r.get("index"), where, f"{f}.index")
        if r.get("file") != layout.partition_file(index):
            raise _fail(where, f"{f}.file", f"{r.get('file')!r:.120} is not {layout.partition_file(index)}")
        hex64(r.get("sha256"), where, f"{f}.sha256")
        for k in ("base", "size", "used"):
            size(r.get(k), where, f"{f}.{k}")
        if not isinstance(r.get("node"), str) or not _NODE.fullmatch(r["node"]):
            raise _fail(where, f"{f}.node", f"{r.get('node')!r:.80} is not a device-tree node name")
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


def loads(data: bytes | str, where: str) -> Any:
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as e:
        raise _fail(where, "", f"not JSON ({e})") from None


# -- local files ---------------------------------------------------------------------------------
def open_under(base: Path, rel: str, where: str = "") -> BinaryIO:
    """Open the regular file ``base/rel`` for reading without following a symlink in any part
    of ``rel`` (``base`` itself is the user's choice and may be one)."""
    rel_path(rel, where or str(base), "path")
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    parts = rel.split("/")
    fd = os.open(base, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        for part in parts[:-1]:
            nxt = os.open(part, flags | getattr(os, "O_DIRECTORY", 0), dir_fd=fd)
            os.close(fd)
            fd = nxt
        nxt = os.open(parts[-1], flags | getattr(os, "O_NONBLOCK", 0), dir_fd=fd)
    except OSError as e:
        raise SchemaError(f"{base / rel}: cannot open ({'a symlink, refused' if e.errno in (40, 20) else e.strerror})"
                          ) from None
    finally:
        os.close(fd)
    if not stat.S_ISREG(os.fstat(nxt).st_mode):
        os.close(nxt)
        raise SchemaError(f"{base / rel}: not a regular file")
    return os.fdopen(nxt, "rb")


class BuildDir:
    """A ``q25deploy build`` directory, read only through the checks above."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def read_json(self, rel: str, limit: int = MAX_JSON) -> Any:
        with open_under(self.path, rel) as f:
            data = f.read(limit + 1)
        if len(data) > limit:
            raise SchemaError(f"{self.path / rel}: larger than {limit:,} bytes")
        return loads(data, str(self.path / rel))

    @cached_property
    def manifest(self) -> dict[str, Artifact]:
        return parse_manifest(self.read_json(layout.MANIFEST), str(self.path / layout.MANIFEST))

    @cached_property
    def info(self) -> BuildInfo:
        return parse_build_info(self.read_json(layout.BUILD_INFO), str(self.path / layout.BUILD_INFO))

    @cached_property
    def partition_map(self) -> dict:
        return parse_partition_map(self.read_json(layout.PARTITION_MAP), str(self.path / layout.PARTITION_MAP))

    def open(self, rel: str) -> BinaryIO:
        return open_under(self.path, rel)

    def check_file(self, rel: str) -> Path:
        """``rel`` is in the manifest and is a regular file of the recorded size here (no symlinks)."""
        a = self.manifest.get(rel)
        if a is None:
            raise SchemaError(f"{self.path}: {rel} is not in {layout.MANIFEST}; rebuild with q25deploy build")
        try:
            with self.open(rel) as f:
                actual = os.fstat(f.fileno()).st_size
        except SchemaError as e:
            raise SchemaError(f"{e}; rebuild with q25deploy build") from None
        if actual != a.size:
            raise SchemaError(f"{self.path / rel}: size {actual:,} differs from the build manifest's {a.size:,} "
                              "(rebuild with q25deploy build)")
        return self.path / rel
