"""q25deploy.deploy.ops.expected: the smoke prompts' ids come from the build's record, bound to its
image; a build without one (or recorded for another image or other prompts) has them computed
by the host codec; a tampered record is a one-line error."""

from __future__ import annotations

import json
import shutil

import pytest

from q25deploy.builddir import BuildDir
from q25deploy.deploy.ops.expected import BuildIds
from q25deploy.errors import SchemaError
from q25deploy.tokenizer.codec import Codec
from q25deploy.tokenizer.image.reader import read_image_file
from q25deploy.tokenizer.prompts import smoke_ids

IMAGE = "tokenizer/tokenizer.q25tokrt"


@pytest.fixture
def build(tmp_path, models):
    b = tmp_path / "A"
    shutil.copytree(models["A"], b)
    return b


@pytest.fixture
def host_ids(models):
    return smoke_ids(Codec(read_image_file(models["A"] / IMAGE)))


class _NoCodec:
    def __init__(self, *a):
        raise AssertionError("the host codec was read")


def test_the_recorded_ids_need_no_codec(build, host_ids, monkeypatch):
    monkeypatch.setattr("q25deploy.tokenizer.codec.Codec", _NoCodec)
    assert BuildIds(BuildDir(build), IMAGE).get() == host_ids


def _edit(build, fn) -> None:
    path = build / "smoke_ids.json"
    record = json.loads(path.read_text())
    fn(record)
    path.write_text(json.dumps(record))


@pytest.mark.parametrize(
    "change",
    [
        lambda r: r.update(image_sha256="0" * 64),  # recorded for another image
        lambda r: r["prompts"].pop(),  # an older tool's prompts
        lambda r: r["prompts"][0].update(text="another prompt"),
    ],
)
def test_a_record_for_another_image_or_prompts_is_not_used(build, host_ids, change):
    _edit(build, change)
    _edit(build, lambda r: r["prompts"][0].update(ids=[1, 2, 3]) if r["prompts"] else None)  # would fail the board
    assert BuildIds(BuildDir(build), IMAGE).get() == host_ids


def test_a_build_without_a_record_computes_them(build, host_ids):
    manifest = json.loads((build / "manifest.json").read_text())
    manifest["artifacts"] = [a for a in manifest["artifacts"] if a["path"] != "smoke_ids.json"]
    (build / "manifest.json").write_text(json.dumps(manifest))
    (build / "smoke_ids.json").unlink()
    ids = BuildIds(BuildDir(build), IMAGE)
    ids.warm()
    assert ids.get() == host_ids


def test_a_tampered_record_is_a_one_line_error(build):
    _edit(build, lambda r: r["prompts"][2].update(ids="1 2 3"))
    with pytest.raises(SchemaError, match=r"smoke_ids\.json: prompts\[2\]\.ids") as e:
        BuildIds(BuildDir(build), IMAGE).get()
    assert "\n" not in str(e.value)
    ids = BuildIds(BuildDir(build), IMAGE)
    ids.warm()  # in the background the error is left for the smoke test to report
    with pytest.raises(SchemaError):
        ids.get()
