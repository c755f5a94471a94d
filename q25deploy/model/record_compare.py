"""A board's ``q25tok generate --dump-layers`` output against the build's forward record: the
first place they differ, named by prompt step and layer (docs/forward.md).

Both sides compute the same graph (llama.cpp's, int8 activations before every quantised
product: ``activations.py``) in float32, in different orders. The activations' rounding to
int8 turns a last-bit difference into a whole quantisation step now and then, and a deep or
small model carries it on: the states agree to about 1e-3 of their norm (measured worst: 5.4e-3
tiny, 1.6e-3 tiny-untied, 1.3e-3 0.5B-shaped) and the top logits to about 1e-2. A state whose
norm or values differ by more than :data:`STATE_RTOL` of the record's norm differs (a block
scale changed by a power of two moves its layer's state far more). A token may differ only
where the record's top-two margin is below :data:`TOKEN_MARGIN` (a near-tie either side may
break). The ids are forced (the prompt, then the record's continuation), so both sides'
contexts stay the same whatever token each predicts: a near tie broken the other way does not
end the comparison.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

STATE_RTOL = 2e-2  # of the record's norm (measured worst 5.4e-3)
LOGIT_ATOL = 5e-2  # a top logit, absolute, relative above 1 (measured worst 1.1e-2)
TOKEN_MARGIN = 0.1  # below this record margin, either token is right (a flip seen at 0.026)


@dataclass(frozen=True)
class Difference:
    step: int
    where: str  # "embd", "layer N", "output", "logits" or "token"
    detail: str

    def __str__(self) -> str:
        return f"step {self.step}: {self.where}: {self.detail}"


def first_prompts(record: dict, n: int | None) -> dict:
    """The forward record cut to its first ``n`` prompts (None: all of them), as ``--forward``
    asks (deploy, smoke, package)."""
    return record if n is None else {**record, "prompts": record["prompts"][:n]}


def _floats(words: list[str]) -> list[float]:
    return [float(w) for w in words]


def parse_dump(text: str) -> list[dict]:
    """The steps of ``q25tok generate --dump-layers`` (ValueError on a malformed line)."""
    steps: list[dict] = []
    for line in text.splitlines():
        w = line.split()
        if not w:
            continue
        if w[0] == "step" and len(w) == 8 and (w[2], w[4], w[6]) == ("pos", "token", "margin"):
            steps.append({"position": int(w[3]), "token": int(w[5]), "margin": float(w[7]), "layers": []})
            continue
        if not steps:
            raise ValueError(f"a line before the first step: {line[:80]!r}")
        st = steps[-1]
        if w[0] == "top" and len(w) % 2 == 1:
            st["top"] = [[int(w[i]), float(w[i + 1])] for i in range(1, len(w), 2)]
        elif w[0] in ("embd", "output") and len(w) == 8 and (w[1], w[3]) == ("norm", "values"):
            st[w[0]] = {"norm": float(w[2]), "values": _floats(w[4:])}
        elif w[0] == "layer" and len(w) == 9 and (w[2], w[4]) == ("norm", "values") and int(w[1]) == len(st["layers"]):
            st["layers"].append({"norm": float(w[3]), "values": _floats(w[5:])})
        else:
            raise ValueError(f"unexpected line: {line[:80]!r}")
    return steps


def _finite(x) -> bool:
    return x is not None and math.isfinite(x)


def _state_differs(got: dict, want: dict) -> str | None:
    """What differs in one state; a value that is not finite on either side always differs
    (the host's are ``null`` in the record: docs/forward.md)."""
    scale = want["norm"]
    if not _finite(scale):
        return f"the host reference is not finite here, board norm {got['norm']:.9g}"
    if not _finite(got["norm"]):
        return f"the board state is not finite (norm {got['norm']}), host {scale:.9g}"
    tol = STATE_RTOL * max(scale, 1e-30)
    if not abs(got["norm"] - scale) <= tol:
        return f"norm {got['norm']:.9g}, host {scale:.9g}"
    for i, (a, b) in enumerate(zip(got["values"], want["values"])):
        if not _finite(b):
            return f"value #{i} of the host reference is not finite, board {a:.9g}"
        if not abs(a - b) <= tol:
            what = "" if math.isfinite(a) else " (not finite)"
            return f"value #{i} {a:.9g}{what}, host {b:.9g}"
    return None


def first_difference(recorded: dict, board: list[dict]) -> Difference | None:
    """Where the board's steps (:func:`parse_dump`) first differ from one prompt of the record
    (``forward_record.json``'s ``prompts[i]``); None when they agree as far as they can."""
    steps = recorded["steps"]
    if len(board) < len(steps):
        return Difference(len(board), "token", f"the board printed {len(board)} of {len(steps)} steps")
    for s, (want, got) in enumerate(zip(steps, board)):
        parts = [("embd", got.get("embd"), want["embd"])]
        parts += [(f"layer {i}", g, w) for i, (g, w) in enumerate(zip(got["layers"], want["layers"]))]
        if len(got["layers"]) != len(want["layers"]):
            return Difference(s, "layer", f"{len(got['layers'])} layers, host {len(want['layers'])}")
        parts.append(("output", got.get("output"), want["output"]))
        for where, g, w in parts:
            problem = "missing" if g is None else _state_differs(g, w)
            if problem:
                return Difference(s, where, problem)
        if got["token"] != want["token"] and want["margin"] is not None and want["margin"] >= TOKEN_MARGIN:
            return Difference(s, "token", f"{got['token']}, host {want['token']} (margin {want['margin']:.3g})")
        for (gi, gv), (wi, wv) in zip(got.get("top", []), want["top"]):
            if not _finite(wv) or not math.isfinite(gv):
                host = f"{wv:.9g}" if _finite(wv) else "nan"
                return Difference(s, "logits", f"logit of {gi} {gv:.9g}, host {host}: not finite")
            if gi != wi and abs(gv - wv) > LOGIT_ATOL:
                return Difference(s, "logits", f"top id {gi}, host {wi}")
            if wv is not None and not abs(gv - wv) <= LOGIT_ATOL * max(1.0, abs(wv)):
                return Difference(s, "logits", f"logit of {gi} {gv:.9g}, host {wv:.9g}")
    return None


def near_tie(recorded: dict, board: list[dict]) -> str | None:
    """The first step where the board's token is not the host's at a near tie (what ``q25tok
    compare`` prints then), or None."""
    for s, (want, got) in enumerate(zip(recorded["steps"], board)):
        if got["token"] != want["token"]:
            margin = "nan" if want["margin"] is None else f"{want['margin']:.9g}"
            return f"near-tie at step {s}: token {got['token']}, host {want['token']} (margin {margin})"
    return None


def _state_finite(st: dict) -> bool:
    return _finite(st["norm"]) and all(_finite(v) for v in st["values"])


def first_non_finite(record: dict) -> str | None:
    """Where the host reference first goes non-finite (its state ``null`` in the record): the
    earliest step of any prompt, and in it the first of the embedding, the layers, the output
    and the logits; None when every value is finite (``build`` warns of it)."""
    found: list[tuple[int, int, str]] = []
    for p, prompt in enumerate(record["prompts"]):
        for s, st in enumerate(prompt["steps"]):
            parts = [("embd", st["embd"])] + [(f"layer {i} (blk.{i}.*)", x) for i, x in enumerate(st["layers"])]
            bad = [where for where, x in [*parts, ("output", st["output"])] if not _state_finite(x)]
            if not bad and not all(_finite(v) for _, v in st["top"]):
                bad = ["logits"]
            if bad:
                found.append((s, p, bad[0]))
                break
    if not found:
        return None
    s, p, where = min(found)
    return f"{where} at step {s} of smoke prompt {p}"
