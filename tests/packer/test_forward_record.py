"""``build``'s ``forward_record.json`` and ``model_hparams.txt`` (docs/forward.md): what they
hold, that a release carries them, and that a rebuild takes the record from the content cache
instead of running the model again."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from q25deploy import layout, schema
from q25deploy.builddir import BuildDir
from q25deploy.cli import main
from q25deploy.deploy.state.release import release_from_build
from q25deploy.errors import SchemaError
from q25deploy.model.forward import Forward, KVCache
from q25deploy.model.gguf import GGUFFile
from q25deploy.model.hparams import runnable
from q25deploy.model.weights import Weights
from q25deploy.packer import forward_record
from q25deploy.tokenizer.prompts import SMOKE_PROMPTS


def test_hparams_file_holds_the_metadata_as_the_c_runtime_reads_it(builds, qwen25_tiny):
    text = (builds["kv260"] / layout.HPARAMS).read_bytes()
    assert text.isascii() and all(len(line) <= 128 for line in text.split(b"\n"))
    rows = [line.split("=", 1) for line in text.decode().splitlines() if not line.startswith("#")]
    kv = dict(rows)
    assert len(kv) == len(rows)  # every key once
    with GGUFFile(qwen25_tiny) as f:
        md = f.metadata
        assert kv["format"] == "q25deploy-hparams/1" and kv["arch"] == "qwen2"
        assert int(kv["n_layer"]) == md["qwen2.block_count"] == 2
        assert int(kv["n_embd"]) == md["qwen2.embedding_length"]
        assert int(kv["n_ff"]) == md["qwen2.feed_forward_length"]
        assert int(kv["n_head"]) == md["qwen2.attention.head_count"]
        assert int(kv["n_head_kv"]) == md["qwen2.attention.head_count_kv"]
        assert int(kv["head_dim"]) == int(kv["n_rot"]) == int(kv["n_embd"]) // int(kv["n_head"])
        assert int(kv["n_vocab"]) == len(md["tokenizer.ggml.tokens"])
        # strtof of the text gives the GGUF's float32 exactly
        assert np.float32(kv["rope_freq_base"]) == np.float32(md["qwen2.rope.freq_base"])
        assert np.float32(kv["rms_eps"]) == np.float32(md["qwen2.attention.layer_norm_rms_epsilon"])
        assert kv["tied_output"] == "1" and kv["add_bos"] == "0"
        assert int(kv["eos_token_id"]) == md["tokenizer.ggml.eos_token_id"]


def test_record_follows_the_reference_on_the_smoke_ids(builds, qwen25_tiny):
    """Each prompt, then its continuation (the prompt's ids again), evaluated one position at
    a time as a board's KV cache would: every reported position is the record's step, to
    float32 rounding (the record's pass multiplies every position at once)."""
    b = BuildDir(builds["kv260"])
    rec = b.forward_record
    _, cases = b.smoke_ids
    assert [p["ids"] for p in rec["prompts"]] == [ids for _, _, ids in cases]
    assert [p["forced"] for p in rec["prompts"]] == [(ids * 8)[:7] for _, _, ids in cases]
    assert rec["summary_indices"] == [0, 8, 16, 24]
    with GGUFFile(qwen25_tiny) as f:
        fw = Forward(Weights(f), runnable(f))
        for p in (rec["prompts"][0], rec["prompts"][5]):  # plain text, the chat prompt
            cache = KVCache.empty(fw.hp, len(p["ids"]) + 7)
            feed = p["ids"]
            for s, (step, more) in enumerate(zip(p["steps"], [*p["forced"], None])):
                r = fw.eval([(feed, cache)])[0]
                assert step["position"] == len(p["ids"]) - 1 + s
                assert step["token"] == p["tokens"][s] == int(np.argmax(r.logits))
                assert [i for i, _ in step["top"]] == np.argsort(-r.logits, kind="stable")[:5].tolist()
                np.testing.assert_allclose([v for _, v in step["top"]], np.sort(r.logits)[::-1][:5], rtol=1e-5)
                assert len(step["layers"]) == 2
                for got, state in zip(step["layers"], r.layers):
                    np.testing.assert_allclose(got["values"], state[[0, 8, 16, 24]], rtol=1e-5, atol=1e-6)
                    assert got["norm"] == pytest.approx(float(np.linalg.norm(state.astype(np.float64))), rel=1e-6)
                feed = [more]


def test_the_record_is_one_pass_over_the_weights(qwen25_tiny, monkeypatch):
    """Every matrix is dequantised once for the whole record (each prompt and its continuation
    at once), not once per step as greedy decoding would."""
    seen: list[str] = []
    real = Weights.products
    monkeypatch.setattr(Weights, "products", lambda self, name, *a, **k: seen.append(name) or real(self, name, *a, **k))
    with GGUFFile(qwen25_tiny) as f:
        ids = [[9707, 11, 1879], [13, 14], [15], [16, 17, 18, 19], [20], [21, 22], [23]]  # one per smoke prompt
        rec = forward_record.compute(f, "0" * 64, ids)
    assert len(seen) == len(set(seen)) == 2 * 7 + 1
    assert [p["forced"] for p in rec["prompts"]][:3] == [
        [9707, 11, 1879, 9707, 11, 1879, 9707],
        [13, 14] * 3 + [13],
        [15] * 7,
    ]
    assert [[st["position"] for st in p["steps"]] for p in rec["prompts"]] == [
        list(range(len(x) - 1, len(x) + 7)) for x in ids
    ]


def test_a_release_carries_the_record_and_the_hparams(builds):
    names = {f.rel for f in release_from_build(builds["qemu"]).files}
    assert {layout.FORWARD_RECORD, layout.HPARAMS} <= names
    recipe = builds["qemu"] / "meta-q25" / "recipes-q25" / "q25-model-assets" / "files"
    assert (recipe / layout.FORWARD_RECORD).read_bytes() == (builds["qemu"] / layout.FORWARD_RECORD).read_bytes()


def test_a_rebuild_reads_the_record_from_the_cache(tmp_path, qwen25_tiny, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    args = ["build", "--target", "kv260", "--model", str(qwen25_tiny), "--out"]
    assert main([*args, str(tmp_path / "a")]) == 0
    first = (tmp_path / "a" / layout.FORWARD_RECORD).read_bytes()

    def no_model_run(*a, **k):
        raise AssertionError("the forward pass ran again")

    monkeypatch.setattr(forward_record, "compute", no_model_run)
    assert main([*args, str(tmp_path / "b"), "--target", "zcu104"]) == 0
    assert (tmp_path / "b" / layout.FORWARD_RECORD).read_bytes() == first
    # a damaged cache entry is a miss: the record is computed again, and the same
    (entry,) = (tmp_path / "cache" / "q25deploy" / "forward").iterdir()
    entry.write_bytes(entry.read_bytes().replace(b'"norm": ', b'"norm": 1', 1))
    monkeypatch.undo()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    calls = []
    real = forward_record.compute
    monkeypatch.setattr(forward_record, "compute", lambda *a, **k: calls.append(1) or real(*a, **k))
    assert main([*args, str(tmp_path / "c"), "--target", "qemu"]) == 0
    assert calls and (tmp_path / "c" / layout.FORWARD_RECORD).read_bytes() == first


def test_build_records_the_prompts_deploy_checks_by_default(tmp_path, qwen25_tiny, content_caches, capsys):
    """The record covers what deploy's and package's default --forward 1 reads; --forward N or
    all records more (a stamp input: a rebuild that asks for other prompts is not up to date);
    --forward 0 records nothing a build could be checked with: a usage error."""
    args = ["build", "--target", "kv260", "--model", str(qwen25_tiny), "--out", str(tmp_path / "b"), "--json"]
    assert main(args) == 0
    rec = BuildDir(tmp_path / "b").forward_record
    assert rec is not None and [p["text"] for p in rec["prompts"]] == [SMOKE_PROMPTS[0][0].decode()]
    for asked, n in (("3", 3), ("all", len(SMOKE_PROMPTS))):
        capsys.readouterr()
        assert main([*args, "--forward", asked]) == 0
        assert json.loads(capsys.readouterr().out)["up_to_date"] is False
        rec = BuildDir(tmp_path / "b").forward_record
        assert [p["text"] for p in rec["prompts"]] == [t.decode() for t, _ in SMOKE_PROMPTS[:n]]
    with pytest.raises(SystemExit) as e:
        main([*args, "--forward", "0"])
    assert e.value.code == 2 and "a build records at least 1 prompt" in capsys.readouterr().err


def _record(builds) -> dict:
    return json.loads((builds["kv260"] / layout.FORWARD_RECORD).read_text())


@pytest.mark.parametrize(
    "damage,field",
    [
        (lambda r: r.update(format="q25deploy-forward-record/0"), "format"),
        (lambda r: r["prompts"][0]["steps"].pop(), "prompts[0].steps"),
        (lambda r: r["prompts"][1].update(tokens=[1] * 8), "prompts[1].tokens"),
        (lambda r: r["prompts"][0]["steps"][3]["layers"].pop(), "prompts[0].steps[3].layers"),
        (lambda r: r["prompts"][0]["steps"][0]["top"][0].__setitem__(1, "big"), "prompts[0].steps[0].top[0]"),
        (lambda r: r["prompts"][2]["steps"][1]["embd"]["values"].append(0.0), "prompts[2].steps[1].embd.values"),
        (lambda r: r["prompts"][0]["ids"].append(-1), "prompts[0].ids[14]"),
        (lambda r: r["prompts"][3]["forced"].pop(), "prompts[3].forced"),
        (lambda r: r["prompts"][3]["forced"].__setitem__(2, 1 << 40), "prompts[3].forced[2]"),
        (lambda r: r["prompts"][4].pop("forced"), "prompts[4].forced"),
        (lambda r: r["prompts"][1]["steps"][2].__setitem__("position", 0), "prompts[1].steps[2].position"),
    ],
)
def test_schema_refuses_a_damaged_record(builds, damage, field):
    rec = _record(builds)
    schema.parse_forward_record(rec, "forward_record.json")
    damage(rec)
    with pytest.raises(SchemaError, match="forward_record.json: " + re.escape(field)):
        schema.parse_forward_record(rec, "forward_record.json")
