"""``q25deploy export tensors``: one file per tensor, byte-identical to the GGUF payload,
with ``tensor_payload_export_manifest.json`` (name, type, shape, bytes, source offset,
sha256, file) for HLS testbenches and Python."""

from __future__ import annotations

from pathlib import Path

from ..model.gguf import GGUFFile
from ..model.source import ModelSource, remember_digest
from .outputs import OutputDir
from .payload import Piece, check_plain_names, pack

MANIFEST_NAME = "tensor_payload_export_manifest.json"


def export_tensors(src: ModelSource, f: GGUFFile, out: Path) -> dict:
    check_plain_names(f.tensors)
    tensors = sorted(f.tensors, key=lambda t: t.data_offset)
    pieces = [Piece(t.name, t.data_offset, t.nbytes, i, 0) for i, t in enumerate(tensors)]
    files = [f"tensors/{t.name}.bin" for t in tensors]
    sizes = [t.nbytes for t in tensors]
    with OutputDir(out, "tensors") as o:
        paths = [str(o.path(rel)) for rel in files]
        # one pass: each tensor file's digest is its tensor's (hashed once)
        d = pack(str(src.path), pieces, paths, sizes, file_digest=src.sha256 is None)
        if src.sha256 is None and d.file is not None:  # the pass hashed the file (file_digest=True)
            src.sha256 = d.file
            remember_digest(src.path, d.file)
        for rel, sha in zip(files, d.outputs):
            o.record(rel, "tensor-payload", sha256=sha)
        manifest = {
            "format": "q25deploy-tensor-export/1",
            "model": {"sha256": src.sha256, "name": f.metadata.get("general.name")},  # content only
            "tensors": [
                {
                    "name": t.name,
                    "type": t.type_name,
                    "shape": list(t.shape),
                    "bytes": t.nbytes,
                    "source_offset": t.data_offset,
                    "sha256": d.pieces[t.name],
                    "file": rel,
                }
                for t, rel in zip(tensors, files)
            ],
        }
        o.write_json(MANIFEST_NAME, manifest, "tensor-payload-manifest")
    return manifest
