"""What the board's ``q25tok generate --dump-layers`` must print, per smoke prompt, rendered
from the build's ``forward_record.json`` for the board's comparison (``q25tok compare``): the
OTA payload's ``q25-forward.txt``, and what deploy's smoke test sends with its forward pass
(q25deploy/deploy/ops/forward_check.py). Pure.

q25tok parses no JSON, so the record travels as the very lines ``generate
--positions`` prints (docs/forward.md), each prompt under a line naming the ids to feed (the
prompt's, then its forced continuation) and the number of last positions reported:

    q25-forward 3
    tolerances state_rtol 0.02 logit_atol 0.05 token_margin 0.1
    prompt 0 steps 8 ids 9707,11,1879,...
    step 0 pos 13 token 138648 margin 0.3013336658477783
    top 138648 3.3467142581939697 58254 3.0453805923461914 ...
    embd norm 0.8374482772463241 values -0.011226654052734375 ...
    layer 0 norm ... values ...
    output norm ... values ...
    step 1 ...
    prompt 1 ...

The tolerances are record_compare.py's, written here once so the board's comparison (``q25tok
compare``, q25tok_compare.c) copies none of them.

Every float is the ``repr`` of the record's value (a float32 or, for a norm, a float64 held
exactly by a Python float): the shortest decimal that reads back as the same double, in
Python (``record_compare.parse_dump``) as in C (``strtod``). A value the record holds as
null (non-finite) is written ``nan``.
"""

from __future__ import annotations

from q25deploy.model.record_compare import LOGIT_ATOL, STATE_RTOL, TOKEN_MARGIN

NAME = "q25-forward.txt"  # the payload file
HEADER = "q25-forward 3"
# record_compare.py's tolerances, for the board's comparison (q25tok compare)
TOLERANCES = f"tolerances state_rtol {STATE_RTOL!r} logit_atol {LOGIT_ATOL!r} token_margin {TOKEN_MARGIN!r}"


def _num(v: float | None) -> str:
    return "nan" if v is None else repr(float(v))


def _state(what: str, s: dict) -> str:
    return f"{what} norm {_num(s['norm'])} values {' '.join(_num(v) for v in s['values'])}"


def dump_lines(prompt: dict) -> list[str]:
    """The ``--dump-layers`` lines of one prompt of the record (``prompts[i]``), step by step."""
    out = []
    for s, st in enumerate(prompt["steps"]):
        out.append(f"step {s} pos {st['position']} token {st['token']} margin {_num(st['margin'])}")
        out.append("top " + " ".join(f"{i} {_num(v)}" for i, v in st["top"]))
        out.append(_state("embd", st["embd"]))
        out += [_state(f"layer {n}", x) for n, x in enumerate(st["layers"])]
        out.append(_state("output", st["output"]))
    return out


def render(record: dict) -> bytes:
    """``q25-forward.txt`` for a (schema-checked) forward record: every prompt's ids and steps."""
    lines = [HEADER, TOLERANCES]
    for i, p in enumerate(record["prompts"]):
        fed = p["ids"] + p["forced"]
        lines.append(f"prompt {i} steps {len(p['steps'])} ids {','.join(str(t) for t in fed)}")
        lines += dump_lines(p)
    return ("\n".join(lines) + "\n").encode("ascii")
