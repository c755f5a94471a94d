from __future__ import annotations

import hashlib
import json

from q25deploy.cli import main
from q25deploy.model.gguf import GGUFFile


def test_export_tensors_is_byte_identical_with_a_manifest(tmp_path, qwen25_tiny, capsys):
    out = tmp_path / "t"
    assert main(["export", "tensors", str(qwen25_tiny), "--out", str(out)]) == 0
    m = json.loads((out / "tensor_payload_export_manifest.json").read_text())
    src = qwen25_tiny.read_bytes()
    with GGUFFile(qwen25_tiny) as f:
        assert [t["name"] for t in m["tensors"]] == [t.name for t in sorted(f.tensors, key=lambda t: t.data_offset)]
        for t, info in zip(m["tensors"], sorted(f.tensors, key=lambda t: t.data_offset)):
            data = (out / t["file"]).read_bytes()
            assert data == src[info.data_offset : info.data_offset + info.nbytes]
            assert (t["type"], t["shape"], t["bytes"], t["source_offset"]) == (
                info.type_name,
                list(info.shape),
                info.nbytes,
                info.data_offset,
            )
            assert t["sha256"] == hashlib.sha256(data).hexdigest()
    assert m["model"]["sha256"] == hashlib.sha256(src).hexdigest()
    manifest = json.loads((out / "manifest.json").read_text())
    assert sum(1 for a in manifest["artifacts"] if a["kind"] == "tensor-payload") == len(m["tensors"])
