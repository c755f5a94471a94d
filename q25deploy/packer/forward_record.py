"""The build's record of the host reference (``forward_record.json``) and the model's
hyperparameters for the C runtime (``model_hparams.txt``): docs/forward.md.

The record is the one expensive thing here (a pass over every weight: each smoke prompt and
its forced continuation evaluated at once, :func:`~q25deploy.model.generate.forced`), so it is
kept in a content-addressed cache (``$XDG_CACHE_HOME/q25deploy/forward``), keyed by the
model's sha256, the prompts' ids and the record's format: a rebuild, for another target or
into another directory, reads it instead of running the model. A cache file is named by the
sha256 of its bytes, and one whose bytes or contents do not check out is a miss.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np

from .. import __version__, layout
from ..common import cache_dir as default_cache_dir
from ..common import is_sha256, json_bytes, json_digest, write_atomic
from ..errors import SchemaError
from ..model.forward import Forward
from ..model.generate import STEPS, continuation, forced, summary_indices
from ..model.gguf import GGUFFile
from ..model.hparams import HParams, hparams_text, runnable
from ..model.weights import Weights
from ..numerics import kernels
from ..tokenizer.prompts import SMOKE_PROMPTS

FORMAT = layout.FORWARD_RECORD_FORMAT
RECORD_KIND = "forward-record"
HPARAMS_KIND = "model-hparams"


def fed_ids(hp: HParams, ids: list[list[int]]) -> list[list[int]]:
    """The ids the forward pass is given: the smoke ids, BOS first when the model asks for it."""
    return [([hp.bos_token_id] if hp.add_bos else []) + list(x) for x in ids]


def compute(f: GGUFFile, model_sha256: str, ids: list[list[int]], steps: int = STEPS) -> dict:
    """The record of the first ``len(ids)`` smoke prompts (``ids``: the host codec's ids of each)."""
    hp = runnable(f)
    fed = fed_ids(hp, ids)
    more = [continuation(x or y, steps) for x, y in zip(ids, fed, strict=True)]
    with np.errstate(all="ignore"):  # a non-finite pass is recorded (null) and build warns of it
        runs = forced(Forward(Weights(f), hp), fed, more)
    return {
        "format": FORMAT,
        "model_sha256": model_sha256,
        "steps": steps,
        "summary_indices": summary_indices(hp.n_embd),
        "prompts": [
            {
                "text": text.decode("utf-8"),
                "special": special,
                "ids": x,
                "forced": m,
                "tokens": [s["token"] for s in run],
                "steps": run,
            }
            for (text, special), x, m, run in zip(SMOKE_PROMPTS[: len(ids)], fed, more, runs, strict=True)
        ],
    }


def cache_key(model_sha256: str, ids: list[list[int]], steps: int = STEPS) -> str:
    return json_digest([FORMAT, model_sha256, ids, steps, __version__, kernels()])


def _dir(cache_dir: Path | None) -> Path:
    return (cache_dir or default_cache_dir()) / "forward"


def lookup(key: str, model_sha256: str, cache_dir: Path | None = None) -> bytes | None:
    """The cached record's bytes, or None; a damaged entry is removed."""
    from .. import schema

    d = _dir(cache_dir)
    if not is_sha256(key):
        return None
    try:
        names = [n for n in os.listdir(d) if n.startswith(key + "-") and n.endswith(".json")]
    except OSError:
        return None
    for n in names:
        path = d / n
        try:
            data = path.read_bytes()
            if hashlib.sha256(data).hexdigest() != n[len(key) + 1 : -5]:
                raise SchemaError("changed")
            rec = schema.parse_forward_record(schema.loads(data, str(path)), str(path))
            if rec["model_sha256"] == model_sha256:
                return data
        except (OSError, SchemaError):
            pass
        try:
            path.unlink()
        except OSError:
            pass
    return None


def store(key: str, data: bytes, cache_dir: Path | None = None) -> None:
    """Keep a record (atomically); a failure only costs recomputing it next time."""
    if not is_sha256(key):
        return
    try:
        write_atomic(_dir(cache_dir) / f"{key}-{hashlib.sha256(data).hexdigest()}.json", data, sync=False)
    except OSError:
        pass


def record_bytes(f: GGUFFile, model_sha256: str, ids: list[list[int]], progress=lambda s: None) -> bytes:
    """``forward_record.json``'s bytes, from the cache or computed (and then cached)."""
    key = cache_key(model_sha256, ids)
    data = lookup(key, model_sha256)
    if data is None:
        progress("running the host reference forward pass on the smoke prompts (once per model)")
        data = json_bytes(compute(f, model_sha256, ids))
        store(key, data)
    return data


def hparams_bytes(f: GGUFFile) -> bytes:
    return hparams_text(runnable(f)).encode("ascii")
