from __future__ import annotations

import os

import pytest
from ollama_store import add_model

from q25deploy.errors import ModelSourceError
from q25deploy.model import source as model_source
from q25deploy.model.source import parse_reference, resolve


@pytest.fixture
def store(tmp_path, monkeypatch, qwen25_tiny):
    root = tmp_path / "ollama"
    monkeypatch.setenv("OLLAMA_MODELS", str(root))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    add_model(root, "qwen2.5:0.5b", qwen25_tiny)
    return root


@pytest.mark.parametrize(
    "ref, parts",
    [
        ("qwen2.5", ("registry.ollama.ai", "library", "qwen2.5", "latest")),
        ("qwen2.5:0.5b", ("registry.ollama.ai", "library", "qwen2.5", "0.5b")),
        ("me/qwen2.5:tuned", ("registry.ollama.ai", "me", "qwen2.5", "tuned")),
        ("hf.co/org/model:Q4_K_M", ("hf.co", "org", "model", "Q4_K_M")),
    ],
)
def test_parse_reference(ref, parts):
    assert parse_reference(ref) == parts


def test_resolves_an_ollama_model_and_keeps_its_text_layers(store):
    src = resolve("qwen2.5:0.5b")
    assert src.kind == "ollama" and src.path.parent.name == "blobs"
    assert src.ollama["license"] == "Apache License 2.0 (test)"
    assert src.ollama["template"] == "{{ .Prompt }}" and "stop" in src.ollama["params"]
    assert src.digest() == src.path.name.split("-")[1]


def test_a_path_is_a_file_source(qwen25_tiny):
    src = resolve(str(qwen25_tiny))
    assert src.kind == "file" and src.path == qwen25_tiny and src.sha256 is None


def test_verified_blob_is_not_rehashed(store, monkeypatch):
    resolve("qwen2.5:0.5b")
    calls = []
    real = model_source.hashlib.sha256
    monkeypatch.setattr(model_source.hashlib, "sha256", lambda *a: calls.append(1) or real(*a))
    resolve("qwen2.5:0.5b")
    # only the small text layers are hashed again, never the model blob
    assert len(calls) == 3


def test_digest_mismatch(store):
    blob = resolve("qwen2.5:0.5b").path
    data = bytearray(blob.read_bytes())
    data[-1] ^= 0xFF
    blob.write_bytes(bytes(data))
    os.utime(blob, ns=(1, 1))  # a new mtime: the cache entry no longer applies
    with pytest.raises(ModelSourceError, match="does not match the manifest"):
        resolve("qwen2.5:0.5b")


def test_size_mismatch(store):
    blob = resolve("qwen2.5:0.5b").path
    with open(blob, "ab") as f:
        f.write(b"x")
    with pytest.raises(ModelSourceError, match="size .* does not match"):
        resolve("qwen2.5:0.5b")


def test_missing_blob(store):
    resolve("qwen2.5:0.5b").path.unlink()
    with pytest.raises(ModelSourceError, match="is missing"):
        resolve("qwen2.5:0.5b")


def test_unknown_model_lists_what_is_there(store):
    with pytest.raises(ModelSourceError, match=r"available: qwen2.5:0.5b"):
        resolve("llama3:8b")


def test_no_store(tmp_path, monkeypatch):
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "nothing"))
    with pytest.raises(ModelSourceError, match="no Ollama model store"):
        resolve("qwen2.5:0.5b")


def test_missing_file_and_bad_reference(tmp_path):
    with pytest.raises(ModelSourceError, match="no such model file"):
        resolve(str(tmp_path / "x.gguf"))
    with pytest.raises(ModelSourceError, match="neither a .gguf file nor an Ollama"):
        resolve("bad name with spaces")


def test_an_oversized_ollama_text_layer_is_refused_before_it_is_read(tmp_path, monkeypatch, qwen25_tiny):

    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "o"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "c"))
    add_model(tmp_path / "o", "big:1", qwen25_tiny, license="x" * ((1 << 20) + 1))
    with pytest.raises(ModelSourceError, match="a text layer may have at most"):
        resolve("big:1")
