"""q25deploy.schema: every file that crosses a boundary is checked value by value, and a build
directory's files are never read through a symlink."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from q25deploy import schema
from q25deploy.deploy.state.release import release_from_build
from q25deploy.errors import SchemaError

H = "a" * 64
RID = "0123456789abcdef"


@pytest.mark.parametrize(
    "path",
    [
        "",
        "/etc/passwd",
        "a//b",
        "./a",
        "a/./b",
        "a/..",
        "../x",
        "partitions/../../x",
        "a/",
        ".hidden",
        "a\nb",
        "a\\b",
        7,
        None,
    ],
)
def test_unsafe_relative_paths_are_refused(path):
    with pytest.raises(SchemaError, match="f.json: p: "):
        schema.rel_path(path, "f.json", "p")


@pytest.mark.parametrize(
    "path",
    [
        "build.json",
        "tokenizer/tokenizer.q25tokrt",
        "partitions/region_07.bin",
        "meta-q25/recipes-x/linux-xlnx_%.bbappend",
        "q25_memory_map.h",
    ],
)
def test_build_paths_from_the_allowed_set(path):
    assert schema.build_path(path, "m", "p") == path


@pytest.mark.parametrize(
    "path",
    [
        "partitions/../../../../x",
        "partitions/region_0.bin",
        "partitions/x.bin",
        "tokenizer/a/b",
        "etc/passwd",
        "manifest.json",
        "meta-q25",
        ".q25deploy-stamp.json",
    ],
)
def test_build_paths_outside_the_allowed_set(path):
    with pytest.raises(SchemaError):
        schema.build_path(path, "m", "p")


@pytest.mark.parametrize(
    "bad",
    [
        {"sha256": "A" * 64},
        {"sha256": H[:63]},
        {"size": -1},
        {"size": True},
        {"size": 1.0},
        {"kind": "x y"},
        {"path": "../x"},
    ],
)
def test_manifest_values(bad):
    entry = {"path": "build.json", "kind": "build-info", "sha256": H, "size": 1}
    assert schema.parse_manifest({"artifacts": [entry]}, "m")["build.json"].size == 1
    with pytest.raises(SchemaError, match=r"^m: artifacts\[0\]\.\w+: "):
        schema.parse_manifest({"artifacts": [{**entry, **bad}]}, "m")


def state(**over):
    rec = {
        "files": {"tokenizer.q25tokrt": [H, 1], "partitions/region_00.bin": [H, 2]},
        "vocab_fingerprint": H,
        "model_sha256": None,
        "target": "qemu",
        "deployed_at": "t",
        "image": "tokenizer.q25tokrt",
    }
    doc = {"format": schema.STATE_FORMAT, "current": RID, "previous": None, "releases": {RID: rec}}
    return {**doc, **over}


@pytest.mark.parametrize(
    "doc",
    [
        state(current="../../../x"),
        state(current="0123456789ABCDEF"),
        state(previous="fedcba9876543210"),
        state(releases={"../x": state()["releases"][RID]}),
        state(releases={RID: {**state()["releases"][RID], "files": {"../../etc/shadow": [H, 1]}}}),
        state(releases={RID: {**state()["releases"][RID], "files": {"q25tok": ["x", 1]}}}),
        state(releases={RID: {**state()["releases"][RID], "image": "/etc/shadow"}}),
        state(releases={RID: {**state()["releases"][RID], "forward": {"key": "x", "prompts": 1}}}),
        state(releases={RID: {**state()["releases"][RID], "forward": {"key": H, "prompts": -1}}}),
        state(releases={RID: {**state()["releases"][RID], "forward": {"key": H, "prompts": 1, "release": "../x"}}}),
        state(format="other"),
        [],
        "x",
    ],
)
def test_tampered_state_files_are_refused(doc):
    assert schema.parse_state(state(), "s")["current"] == RID
    passed = {"key": H, "prompts": 1, "release": RID}  # a forward pass a deploy recorded
    assert schema.parse_state(state(releases={RID: {**state()["releases"][RID], "forward": passed}}), "s")
    with pytest.raises(SchemaError):
        schema.parse_state(doc, "s")


def test_intent_and_release_and_asset_index():
    assert schema.parse_intent({"format": schema.INTENT_FORMAT, "current": RID, "state": state()}, "i")
    with pytest.raises(SchemaError, match="current"):
        schema.parse_intent({"format": schema.INTENT_FORMAT, "current": "f" * 16, "state": state()}, "i")
    rel = {
        "id": RID,
        "vocab_fingerprint": H,
        "model_sha256": H,
        "target": "qemu",
        "files": [{"path": "partitions/region_00.bin", "sha256": H, "size": 3}],
    }
    assert schema.parse_release(rel, "r")["id"] == RID
    with pytest.raises(SchemaError, match=r"files\[0\]\.path"):
        schema.parse_release({**rel, "files": [{"path": "../x", "sha256": H, "size": 3}]}, "r")
    assert schema.parse_asset_index([{"path": "merges.txt", "kind": "merges-txt", "sha256": H}], "a")
    with pytest.raises(SchemaError, match=r"a: \[0\]\.path"):
        schema.parse_asset_index([{"path": "../../x", "kind": "merges-txt", "sha256": H}], "a")
    with pytest.raises(SchemaError, match=r"a: \[0\]\.sha256"):
        schema.parse_asset_index([{"path": "merges.txt", "kind": "merges-txt"}], "a")
    with pytest.raises(SchemaError, match="lists no asset"):
        schema.parse_asset_index([], "a")


def test_partition_map_files_and_nodes(builds, tmp_path):
    pmap = json.loads((builds["qemu"] / "partition_map.json").read_text())
    assert schema.parse_partition_map(pmap, "p") is pmap
    for key, value in (
        ("file", "../../../etc/passwd"),
        ("node", "x/../../y"),
        ("node", "rproc@70000000"),  # a foreign no-map node (issue 33, item 4)
        ("node", pmap["regions"][0]["node"] + "0"),  # our prefix, another base
        ("sha256", "0"),
        ("base", -4),
    ):
        bad = json.loads(json.dumps(pmap))
        bad["regions"][0][key] = value
        with pytest.raises(SchemaError, match=rf"regions\[0\]\.{key}"):
            schema.parse_partition_map(bad, "p")


def _drop(doc: dict, path: str) -> None:
    *parents, last = path.split(".")
    for p in parents:
        doc = doc[int(p)] if p.isdigit() else doc[p]
    del doc[last]


@pytest.mark.parametrize(
    "change, field",
    [
        (lambda m: _drop(m, "regions.0.bank"), r"regions\[0\]\.bank"),
        (lambda m: _drop(m, "tensors"), "tensors"),
        (lambda m: _drop(m, "tensors.0.shape"), r"tensors\[0\]\.shape"),
        (lambda m: m["tensors"][0].update(region=99), r"tensors\[0\]\.region"),
        (lambda m: m["tensors"][0].update(bytes=-1), r"tensors\[0\]\.bytes"),
        (lambda m: m["regions"].append(dict(m["regions"][0])), r"regions\[\d+\]\.index"),
    ],
)
def test_a_partition_map_has_what_its_readers_use(builds, change, field):
    """status --svg draws the map's banks and tensors: a map without them is refused here
    (issue 22, item 10), not a KeyError in the picture."""
    bad = json.loads((builds["qemu"] / "partition_map.json").read_text())
    change(bad)
    with pytest.raises(SchemaError, match=field):
        schema.parse_partition_map(bad, "p")


def test_a_symlinked_partition_is_refused(builds, tmp_path):
    b = tmp_path / "b"
    shutil.copytree(builds["qemu"], b, symlinks=True)
    release_from_build(b)  # the copy is fine
    part = b / "partitions" / "region_00.bin"
    secret = tmp_path / "shadow"
    secret.write_bytes(part.read_bytes())  # same size, so only the symlink check can catch it
    part.unlink()
    part.symlink_to(secret)
    with pytest.raises(SchemaError, match="symlink"):
        release_from_build(b)
    part.unlink()
    os.rename(b / "partitions", tmp_path / "elsewhere")
    (b / "partitions").symlink_to(tmp_path / "elsewhere")  # a symlinked directory on the way too
    with pytest.raises(SchemaError, match="symlink"):
        release_from_build(b)


@pytest.mark.parametrize("text", ["{", "[]", '{"image": 3}', '{"target": "qemu", "model": {}, "image": {}}'])
def test_corrupt_build_json_is_one_line_naming_the_file(builds, tmp_path, text):
    b = tmp_path / "b"
    shutil.copytree(builds["qemu"], b)
    (b / "build.json").write_text(text)
    with pytest.raises(SchemaError, match=r"build\.json: ") as e:
        release_from_build(b)
    assert "\n" not in str(e.value)


def _smoke_ids(**change) -> dict:
    doc = {
        "format": "q25deploy-smoke-ids/1",
        "image_sha256": H,
        "prompts": [{"text": "Hello", "special": False, "ids": [9707]}],
    }
    doc["prompts"][0].update(change.pop("prompt", {}))
    return {**doc, **change}


IDS = r"prompts\[0\]\.ids"


def test_smoke_ids():
    assert schema.parse_smoke_ids(_smoke_ids(), "s") == (H, [(b"Hello", False, [9707])])


@pytest.mark.parametrize(
    "doc, field",
    [
        (_smoke_ids(format="q25deploy-smoke-ids/2"), "format"),
        (_smoke_ids(image_sha256="x"), "image_sha256"),
        (_smoke_ids(prompts={}), "prompts"),
        (_smoke_ids(prompt={"text": 3}), r"prompts\[0\]\.text"),
        (_smoke_ids(prompt={"special": 1}), r"prompts\[0\]\.special"),
        (_smoke_ids(prompt={"ids": [1, "2"]}), r"prompts\[0\]\.ids"),
        (_smoke_ids(prompt={"ids": [-1]}), IDS),
        (_smoke_ids(prompt={"ids": [1 << 32]}), IDS),
        (_smoke_ids(prompt={"ids": [True]}), IDS),
        (_smoke_ids(prompt={"ids": None}), IDS),
        (_smoke_ids(prompts=[3]), r"prompts\[0\]"),
    ],
)
def test_tampered_smoke_ids_are_refused(doc, field):
    with pytest.raises(SchemaError, match=rf"^s: {field}"):
        schema.parse_smoke_ids(doc, "s")


ROW = "q25-region0@13f800000 0x13f800000 0x800000 region_00.bin 5292160 " + H


def test_region_table_rows():
    rows = schema.parse_region_table(f"# q25deploy region table 1\n{ROW}\n\n".encode(), "t")
    assert rows == [
        {
            "node": "q25-region0@13f800000",
            "base": 0x13F800000,
            "size": 0x800000,
            "file": "partitions/region_00.bin",
            "used": 5292160,
            "sha256": H,
        }
    ]


@pytest.mark.parametrize(
    "old,new,field",
    [
        ("q25-region0@13f800000 ", "../../../proc/self ", "NODE"),  # climbs out of /reserved-memory
        ("q25-region0@13f800000 ", "a/b ", "NODE"),
        ("q25-region0@13f800000 ", "rproc@13f800000 ", "NODE"),  # another owner's node (issue 33, item 4)
        ("q25-region0@13f800000 ", "q25-region0@70000000 ", "NODE"),  # ours by name, but of another place
        ("region_00.bin", "../../../etc/shadow", "FILE"),  # climbs out of partitions/
        ("region_00.bin", "tokenizer.q25tokrt", "FILE"),
        ("0x13f800000", "0x13f800004", "BASE"),  # not a whole 16-byte word
        ("0x800000", "8388608", "SIZE"),
        ("5292160", "8388609", "FILE_SIZE"),  # larger than the region
        ("5292160", "-1", "FILE_SIZE"),
        (H, H.upper(), "SHA256"),
        (H, H + " extra", "line"),
    ],
)
def test_tampered_region_tables_are_refused(old, new, field):
    with pytest.raises(SchemaError, match=rf"^t: line 1 ?{field if field != 'line' else ''}"):
        schema.parse_region_table(ROW.replace(old, new, 1).encode(), "t")


def test_a_build_whose_region_table_was_edited_is_not_deployed(builds, tmp_path):
    """regions.tab travels to the board, where q25tok load writes physical memory by it: a
    ``../`` node of the same length (the manifest records only the size the deploy checks
    first) is refused before anything is sent, and so is a table that names other regions
    than the partition map."""
    b = tmp_path / "b"
    shutil.copytree(builds["qemu"], b)
    table = b / "partitions" / "regions.tab"
    text = table.read_text()
    node = json.loads((b / "partition_map.json").read_text())["regions"][0]["node"]
    table.write_text(text.replace(node, ("../" * 8 + "x")[: len(node)], 1))
    with pytest.raises(SchemaError, match=r"regions\.tab: line \d+ NODE"):
        release_from_build(b)
    table.write_text(text.replace("region_00.bin", "region_01.bin", 1))
    with pytest.raises(SchemaError, match=r"regions\.tab: its regions differ from partition_map\.json"):
        release_from_build(b)
