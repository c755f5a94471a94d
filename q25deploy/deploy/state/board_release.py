"""What a board runs, read from the board itself: its partition map and its tokenizer image
(for the host codec the smoke test compares with), so ``smoke`` and ``status`` need no local
build. The image is fetched once and kept in the cache folder under its sha256 (checked
against the board's state file each time it is used)."""

from __future__ import annotations

import hashlib

from ... import layout, schema
from ...board.boardfile import Board
from ...board.ours import foreign
from ...common import cache_dir, write_atomic
from ...errors import DeployError, SchemaError
from .boardfiles import BoardFiles

#: the release record of a board that runs its image's own assets (no deploy, no OTA install)
IMAGE_RELEASE = "image"


def current_record(files: BoardFiles, state: dict, image_name: str = "tokenizer.q25tokrt") -> dict:
    """The state file's record of the release ``current`` is (files, digests, vocabulary); on a
    board where nothing was deployed, that of the assets its image installed (then
    ``files.current`` is "": the install directory is the release; ``image_name``: the
    target's tokenizer image file)."""
    cur = state.get("releases", {}).get(state.get("current") or "")
    if cur:
        return cur
    image = image_record(files, image_name)
    if image is None:
        raise DeployError(f"{files.board.spec.name}: nothing is deployed (and the image installed no q25 assets)")
    files.current = ""
    return image


def image_record(files: BoardFiles, image_name: str) -> dict | None:
    """The release the board's image installed (the layer's q25-model-assets package: its
    ``assets_manifest.json`` in the install directory, through the schema), as a state record,
    or None without one."""
    data = files.read(layout.ASSETS_MANIFEST)
    if data is None:
        return None
    where = f"{files.board.spec.name}: {files.path(layout.ASSETS_MANIFEST)}"
    try:
        record = schema.parse_assets_manifest(schema.loads(data, where), where, files.install_dir)
    except SchemaError as e:
        raise DeployError(str(e)) from None
    if image_name not in record["files"]:
        raise DeployError(f"{where}: lists no {image_name}")
    record["image"] = image_name
    record["release"] = IMAGE_RELEASE
    return record


#: the current release's partition map, under the install directory
CURRENT_MAP = f"current/{layout.PARTITION_MAP}"


def partition_map(
    files: BoardFiles, fallback: dict | None = None, data: bytes | None = None, board: Board | None = None
) -> dict:
    """The partition map of the release the board runs (its own copy, through the schema): after
    a tokenizer-only update, or with the build of another model of the same vocabulary, the
    board's partitions are those of its release, not of the build in hand. ``data``: its bytes,
    read already (else they are read now); ``board``: the board file, on which every region of
    the board's own map must be ours (:mod:`q25deploy.board.ours`)."""
    data = files.read(files.cur_rel(layout.PARTITION_MAP)) if data is None else data
    if data is None:
        if fallback is None:
            raise DeployError(f"{files.board.spec.name}: the current release has no {layout.PARTITION_MAP}")
        return fallback
    where = f"{files.board.spec.name}: {files.cur(layout.PARTITION_MAP)}"
    try:
        pmap = schema.parse_partition_map(schema.loads(data, where), where)
    except SchemaError as e:
        raise DeployError(str(e)) from None
    why = foreign(board, pmap["regions"]) if board is not None else None
    if why:
        raise DeployError(f"{where}: {why}")
    return pmap


def image_bytes(files: BoardFiles, record: dict) -> bytes:
    """The board's current tokenizer image, checked against the state's sha256: from the cache
    when a run fetched it before, else read from the board once and cached."""
    image = record.get("image") or "tokenizer.q25tokrt"
    entry = record["files"].get(image)
    if not entry:
        raise DeployError(f"{files.board.spec.name}: the state file lists no {image} for the current release")
    digest = entry[0]
    cached = cache_dir() / "board-images" / f"{digest}.q25tokrt"
    try:
        data = cached.read_bytes()
        if hashlib.sha256(data).hexdigest() == digest:
            return data
    except OSError:
        pass
    fetched = files.read(files.cur_rel(image))
    if fetched is None or hashlib.sha256(fetched).hexdigest() != digest:
        raise DeployError(
            f"{files.board.spec.name}: {files.cur(image)} on the board does not match its sha256 in "
            "the board's records (smoke with --build, or deploy again)"
        )
    try:  # the cache is a convenience: a read-only home still works
        write_atomic(cached, fetched, sync=False)
    except OSError:
        pass
    return fetched


def board_codec(files: BoardFiles, record: dict):
    """A host codec of the image the board runs."""
    from ...tokenizer.codec import Codec
    from ...tokenizer.image.reader import open_image

    return Codec(open_image(image_bytes(files, record), name=f"{files.board.spec.name}:{record.get('image')}"))


__all__ = ["board_codec", "current_record", "image_bytes", "image_record", "partition_map"]
