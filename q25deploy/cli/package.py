"""``q25deploy package``: a build as a Mender artifact or an SWUpdate image.

The artifact is written to a temporary file next to ``--out`` and renamed over it when
complete; a failure leaves no partial artifact.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from ..common import atomic_file
from ..errors import OutputError, UsageError
from .common import report_failures

if TYPE_CHECKING:
    from ..ota.plan import OtaPlan

EXTENSIONS = {"mender": ".mender", "swupdate": ".swu"}


def _plan(a: argparse.Namespace, target, pm) -> OtaPlan:
    from ..builddir import BuildDir
    from ..deploy.ops.expected import BuildIds
    from ..ota.plan import plan_package
    from ..plugin.routing import board_hooks

    image_layout = board_hooks(pm, target).q25deploy_image_layout(board=target.board)
    build = BuildDir(a.build)  # build.json checked by the schema: a corrupt one is exit 1, not a crash
    build.check_for(target.board)  # its regions ours on this board (board/ours.py)
    ids = BuildIds(build, build.info.image_path).get()  # the build's record (else the host codec)
    return plan_package(
        a.build,
        target=target.name,
        install_dir=image_layout.install_dir,
        q25tok=image_layout.runtime,
        smoke_ids=ids,
        tokenizer_only=a.tokenizer_only,
        device_tree=target.board.device_tree_path,
        memory=target.board.memory_device,
        allow_unreserved=a.allow_unreserved,
        board=target.board,
        forward_prompts=a.forward,
    )


def _signer(a: argparse.Namespace):
    from ..ota.signing import cms_signature, load_key, mender_signature

    if a.sign_key:
        load_key(a.sign_key)  # a bad key fails now, before the payload is compressed
    if a.format == "mender":
        if a.sign_cert:
            raise UsageError("--sign-cert is for --format swupdate (Mender signs with the key alone)")
        return (lambda manifest: mender_signature(manifest, a.sign_key)) if a.sign_key else None
    if bool(a.sign_key) != bool(a.sign_cert):
        raise UsageError("--format swupdate signs with --sign-key and --sign-cert together")
    return (lambda desc: cms_signature(desc, a.sign_key, a.sign_cert)) if a.sign_key else None


def _write(a: argparse.Namespace, plan: OtaPlan, board, settings: dict, out: Path) -> dict:
    from ..ota import mender, swupdate

    if a.compression is not None and a.format != "mender":
        raise UsageError("--compression is for --format mender (an .swu carries its files as they are)")
    if a.sw_version is not None and a.format != "swupdate":
        raise UsageError("--sw-version is for --format swupdate (a Mender artifact is named by its release)")
    sign = _signer(a)
    try:
        with atomic_file(out) as f, tempfile.TemporaryDirectory(dir=out.parent) as scratch:
            if a.format == "mender":
                types = tuple(a.device_type or [settings["mender_device_type"]])
                packed = mender.compression_for(plan.mode, a.compression)
                h = mender.write_artifact(f, plan, types, scratch=Path(scratch), sign=sign, compression=packed)
                info = {
                    "device_types": list(h.device_types),
                    "provides": h.provides,
                    "depends": h.depends,
                    "compression": packed,
                }
            else:
                revs = tuple(a.hw_revision or [settings["swupdate_hw_revision"]])
                version = a.sw_version or swupdate.default_version(plan)
                swupdate.write_swu(f, plan, board.name, revs, sign=sign, version=version)
                info = {"version": version, "hardware_compatibility": {"board": board.name, "revisions": list(revs)}}
    except OSError as e:
        raise OutputError(f"{out}: cannot write the artifact: {e.strerror or e}") from None
    return info


def cmd_package(a: argparse.Namespace) -> int:
    from ..plugin.manager import make_plugin_manager, resolve_target

    pm, failures = make_plugin_manager()
    target = resolve_target(pm, failures, a.target, a.target_file)
    report_failures(failures)
    a.build = a.build or Path("q25-build") / target.name
    if not (a.build / "build.json").is_file():
        raise UsageError(f"{a.build}: no build there (run q25deploy build --target {target.name}, or give --build)")
    from ..board.ota_settings import ota_settings
    from .progress import Progress, wanted

    prog = Progress(enabled=wanted(quiet=a.quiet, json=a.json), task=target.name)
    with prog.running("package"):
        prog.step("reading the build and planning the artifact")
        plan = _plan(a, target, pm)
        kind = "tokenizer" if a.tokenizer_only else "release"
        out = a.out or Path(f"q25-{target.name}-{kind}-{plan.build_release}{EXTENSIONS[a.format]}")
        prog.step(f"writing the {a.format} artifact")
        info = _write(a, plan, target.board, ota_settings(target.board), out)
    result = {
        "artifact": str(out),
        "format": a.format,
        "artifact_name": plan.artifact_name,
        "mode": plan.mode,
        "release": plan.build_release if plan.mode == "full" else None,
        "size": out.stat().st_size,
        "files": [{"name": f.name, "path": f.rel, "sha256": f.sha256} for f in plan.release_files],
        "signed": bool(a.sign_key),
        **info,
    }
    print(
        json.dumps(result, indent=2)
        if a.json
        else f"{out}: {a.format} {plan.mode} artifact {plan.artifact_name} "
        f"({result['size']:,} bytes{', signed' if a.sign_key else ''})" + _matched_by(info)
    )
    return 0


def _matched_by(info: dict) -> str:
    """What an update server matches an .swu by, and where each value comes from."""
    if "version" not in info:
        return ""
    hw = info["hardware_compatibility"]
    return (
        f"\n  version {info['version']} (--sw-version sets it)"
        f"\n  hardware-compatibility {hw['board']} {', '.join(hw['revisions'])} (the board file's name, "
        "as in /etc/hwrevision; the revision from [ota] swupdate_hw_revision or --hw-revision)"
    )


def add_commands(sub) -> None:
    """Add ``package`` to the CLI's sub-parsers."""
    p = sub.add_parser(
        "package",
        help="a build as a Mender artifact or SWUpdate image (fleets via an OTA engine)",
        description="Write the build's release (or with --tokenizer-only just its tokenizer image) "
        "as a Mender artifact (format 3, update module q25-release) or an SWUpdate .swu; the board "
        "side installs it into releases/<id> and switches current as `q25deploy deploy` does, then "
        "smoke-tests it with q25tok and rolls back on failure. Reproducible: the same build gives "
        "the same bytes.",
    )
    p.add_argument("--target", metavar="NAME", help="target board (device type, install dir)")
    p.add_argument("--target-file", metavar="FILE", help="your own board file")
    p.add_argument("--build", metavar="DIR", type=Path, help="the build to package (default q25-build/TARGET)")
    p.add_argument("--format", required=True, choices=sorted(EXTENSIONS), help="the OTA engine")
    p.add_argument(
        "--tokenizer-only",
        action="store_true",
        help="only the tokenizer image: installs only over a release with the same vocabulary",
    )
    p.add_argument(
        "--allow-unreserved",
        action="store_true",
        help="install even where the board's device tree does not reserve the regions (a warning; "
        "the partitions not loaded)",
    )
    p.add_argument(
        "--out",
        metavar="FILE",
        type=Path,
        help="the artifact (default q25-TARGET-release-ID.mender or .swu in the current directory)",
    )
    p.add_argument(
        "--sign-key",
        metavar="KEY.pem",
        type=Path,
        help="sign: Mender with this RSA or ECDSA P-256 key, SWUpdate (CMS) with it and --sign-cert",
    )
    p.add_argument("--sign-cert", metavar="CERT.pem", type=Path, help="the signer's certificate (SWUpdate)")
    p.add_argument(
        "--device-type",
        action="append",
        metavar="TYPE",
        help="Mender device type (repeatable; default the board file's [ota] mender_device_type)",
    )
    p.add_argument(
        "--compression",
        choices=("gzip", "none"),  # ota/mender.py's COMPRESSIONS (not imported at start-up)
        help="Mender payload compression, as mender-artifact's (default: gzip for --tokenizer-only, "
        "none for a full release: GGUF quant blocks do not compress)",
    )
    p.add_argument(
        "--hw-revision",
        action="append",
        metavar="REV",
        help="SWUpdate hardware-compatibility (repeatable; default [ota] swupdate_hw_revision)",
    )
    p.add_argument(
        "--sw-version",
        metavar="VERSION",
        help="SWUpdate software version, as update servers compare it (default 1.0.0+RELEASE-ID)",
    )
    from .common import forward_prompts
    from .deploy import add_output_options

    p.add_argument(
        "--forward",
        type=forward_prompts,
        default=1,
        metavar="N|all",
        help="the commit-time smoke test runs the model on the first N smoke prompts (default 1; 0: not run)",
    )
    add_output_options(p.add_argument_group("output"))
    p.set_defaults(func=cmd_package)
