"""The text ``q25tok generate --dump-layers`` prints, made from a forward record's steps
(docs/forward.md): what a board that agrees with the host prints, for the comparison's tests."""

from __future__ import annotations


def dump(steps: list[dict]) -> str:
    """The text ``q25tok generate --dump-layers`` prints for these steps (floats as %.9g)."""
    lines = []
    for s, st in enumerate(steps):
        lines.append(f"step {s} pos {st['position']} token {st['token']} margin {st['margin']:.9g}")
        lines.append("top " + " ".join(f"{i} {v:.9g}" for i, v in st["top"]))
        state = lambda d: f"norm {d['norm']:.17g} values " + " ".join(f"{v:.9g}" for v in d["values"])  # noqa: E731
        lines.append("embd " + state(st["embd"]))
        lines += [f"layer {i} " + state(x) for i, x in enumerate(st["layers"])]
        lines.append("output " + state(st["output"]))
    return "\n".join(lines) + "\n"
