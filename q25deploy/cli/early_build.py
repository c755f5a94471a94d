"""``build``'s head start, begun before the command line's own modules load.

A build served from the plan cache into a new directory is mostly the copy of the model's
tensors; :mod:`q25deploy.packer.head_start` starts that copy before the plugins, the target
and the checks are loaded, and the build adopts it only once those checks agree. This reads
the command line for it, and only where argparse would read it the same way: the command word
``build`` first, then only build's own long options (``--opt VALUE`` or ``--opt=VALUE``, each
spelt in full), at most one MODEL, and values that pass the parser's checks
(tests/cli/test_early_build.py holds the sets and the reading to the parser's). Anything else
(an abbreviation, ``-h``, a value that starts with ``-``, MODEL and ``--model`` that differ,
any error at all) starts nothing, and the command reads its arguments as always.
"""

from __future__ import annotations

from collections.abc import Sequence

#: build's long options that take a value, and its flags
VALUED = frozenset(
    {
        "--target",
        "--model",
        "--out",
        "--target-file",
        "--model-license",
        "--model-license-file",
        "--reserve",
        "--layer-release",
        "--layer-maintainer",
    }
)
FLAGS = frozenset({"--json", "--quiet", "--strict"})


def scan(argv: Sequence[str]) -> dict | None:
    """``build``'s options as argparse would read them ({option: value}, MODEL under
    ``"MODEL"``), or None where this cannot be sure of that."""
    if not argv or argv[0] != "build":
        return None
    opts: dict = {}
    words = iter(argv[1:])
    for word in words:
        if not word.startswith("-"):
            if "MODEL" in opts:
                return None  # a second positional: argparse's error
            opts["MODEL"] = word
            continue
        name, eq, value = word.partition("=")
        if name in FLAGS and not eq:
            opts[name] = True
            continue
        if name not in VALUED:
            return None
        if not eq:
            following = next(words, None)
            if following is None or following.startswith("-"):
                return None
            value = following
        if not value:
            return None  # an empty value: what argparse makes of it is not worth guessing
        opts[name] = value  # argparse keeps the last of a repeated option, as this does
    return opts


def request(opts: dict) -> tuple[dict, str | None] | None:
    """(the build's request, its output folder) from :func:`scan`'s options, converted as the
    parser converts them; None where the parser would refuse them."""
    from ..packer.pipeline import request as build_request

    model = opts.get("MODEL")
    if model is not None and opts.get("--model", model) != model:
        return None  # MODEL and --model differ: a usage error
    model = opts.get("--model", model)
    layer_release, maintainer, reserve = 0, opts.get("--layer-maintainer"), opts.get("--reserve")
    if "--layer-release" in opts or maintainer is not None or reserve is not None:
        import argparse

        from .build import reserve_size
        from .common import one_line_text, release_number

        try:
            layer_release = release_number(opts.get("--layer-release", "0"))
            maintainer = one_line_text(maintainer) if maintainer is not None else None
            reserve = reserve_size(reserve) if reserve is not None else None
        except argparse.ArgumentTypeError:
            return None
    target = opts.get("--target")
    asked = build_request(
        target,
        model=model,
        target_file=opts.get("--target-file"),
        model_license=opts.get("--model-license"),
        model_license_file=opts.get("--model-license-file"),
        layer_release=layer_release,
        layer_maintainer=maintainer,
        reserve=reserve,
    )
    return asked, opts.get("--out") or (f"q25-build/{target}" if target else None)


def begin_build(argv: Sequence[str]):
    """The :class:`~q25deploy.packer.head_start.HeadStart` of a ``build`` command line, or None."""
    opts = scan(argv)
    if opts is None:
        return None
    try:
        wanted = request(opts)
        if wanted is None:
            return None
        from ..packer.head_start import start

        return start(*wanted)
    except Exception:  # whatever it is, the build meets it again and reports it
        return None
