"""The ``q25deploy`` command line.

This is the one place where errors become messages and exit codes (see ``EXIT_CODES``,
documented in README.md). Library code raises :class:`~q25deploy.errors.Q25Error`
subclasses and never prints or exits.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Callable, Sequence

from . import __version__
from .boards import BoardFileError
from .deploy.errors import DeployError
from .layer import LicenseError
from .partition import FitError
from .plugin_manager import UnknownTargetError
from .errors import (
    CodecError,
    GGUFError,
    ImageError,
    ModelSourceError,
    OutputError,
    Q25Error,
    TokenizerError,
    ToolError,
    UsageError,
)

#: error class → exit code; the first matching class (in this order) wins
EXIT_CODES: list[tuple[type[Q25Error], int]] = [
    (UsageError, 2),
    (ModelSourceError, 3),
    (GGUFError, 4),
    (TokenizerError, 5),
    (ImageError, 6),
    (CodecError, 7),
    (OutputError, 8),
    (ToolError, 9),
    (FitError, 10),
    (BoardFileError, 11),
    (LicenseError, 12),
    (DeployError, 13),
    (UnknownTargetError, 2),
    (Q25Error, 1),
]
EXIT_DEPLOY = 13  # a host failed (deploy, smoke, rollback, status), the others are unaffected
EXIT_INTERNAL = 70  # a bug: an unexpected exception (EX_SOFTWARE)
EXIT_INTERRUPTED = 130

EPILOG = """\
MODEL is a path to a .gguf file or an Ollama reference such as qwen2.5:0.5b
(looked up in $OLLAMA_MODELS or ~/.ollama/models).

exit codes: 0 ok, 2 usage, 3 model not found / digest mismatch, 4 not a valid GGUF,
5 unsupported tokenizer, 6 bad runtime image, 7 bad token id / encode failure,
8 cannot write output, 9 a system tool is missing or failed, 10 the model does not
fit the board, 11 bad board file, 12 the model's licence is unknown, 13 a board failed
(deploy, smoke, rollback, status; the other boards are unaffected), 70 internal error,
130 interrupted.
"""


def _open_model(ref: str):
    from .gguf_reader import GGUFFile
    from .model_source import resolve

    src = resolve(ref)
    return src, GGUFFile(src.path)


def cmd_inspect(a: argparse.Namespace) -> int:
    from .catalog import build_catalog, render_catalog

    src, f = _open_model(a.model)
    with f:
        cat = build_catalog(src, f)
    if a.json:
        print(json.dumps(cat, indent=2, ensure_ascii=False))
    else:
        print(render_catalog(cat))
    return 0


def cmd_export_tokenizer(a: argparse.Namespace) -> int:
    from .model_source import file_sha256
    from .outputs import OutputDir
    from .progress import Progress
    from .tokenizer_assets import tokenizer_assets, write_assets
    from .vocab import vocab_from_gguf

    prog = Progress()
    prog.step(f"reading {a.model}")
    src, f = _open_model(a.model)
    with f:
        vocab = vocab_from_gguf(f)
        name = f.metadata.get("general.name", "")
    prog.step("hashing the source model")
    digest = src.sha256 or file_sha256(src.path)
    prog.step("building the PS bundle and the runtime image")
    assets, image_manifest = tokenizer_assets(
        vocab, source_sha256=digest, model_name=name if isinstance(name, str) else "", alignment=a.alignment
    )
    prog.step(f"writing {a.out}")
    with OutputDir(a.out) as out:
        write_assets(out, assets)
    prog.done()
    if a.json:
        print(json.dumps({"out": str(a.out), "image": image_manifest}, indent=2))
    else:
        print(f"wrote {len(assets) + 1} files to {a.out}")
        print(f"  runtime image {image_manifest['path']}: {image_manifest['size']:,} bytes, "
              f"vocab fingerprint {image_manifest['vocab_fingerprint'][:16]}")
    return 0


def cmd_export_tensors(a: argparse.Namespace) -> int:
    from .progress import Progress
    from .tensor_export import export_tensors

    prog = Progress()
    prog.step(f"exporting tensors of {a.model}")
    src, f = _open_model(a.model)
    with f:
        manifest = export_tensors(src, f, a.out)
    prog.done()
    total = sum(t["bytes"] for t in manifest["tensors"])
    if a.json:
        print(json.dumps(manifest, indent=2))
    else:
        print(f"wrote {len(manifest['tensors'])} tensors ({total:,} bytes) to {a.out}/tensors")
    return 0


def cmd_targets(a: argparse.Namespace) -> int:
    from .boards import load_board
    from .plugin_manager import make_plugin_manager, registered_targets

    pm, failures = make_plugin_manager()
    rows = []
    for name, (plugin, spec) in registered_targets(pm, failures).items():
        row = {"name": name, "plugin": plugin, "description": spec.description, "board_file": str(spec.board_file)}
        try:
            board = load_board(spec.board_file)
            row["ddr_bytes"] = board.ddr_bytes
        except Q25Error as e:
            row["error"] = str(e)
        rows.append(row)
    _report_failures(failures)
    if a.json:
        print(json.dumps({"targets": rows, "failed_plugins": [{"plugin": f.plugin, "error": f.error}
                                                               for f in failures]}, indent=2))
    else:
        for r in rows:
            size = f"{r['ddr_bytes'] / (1 << 30):g} GiB DDR" if "ddr_bytes" in r else f"broken: {r['error']}"
            print(f"{r['name']:<10} {r['plugin']:<12} {size:<12} {r['description']}")
    return 0


def _report_failures(failures) -> None:
    for f in failures:
        print(f"q25deploy: warning: {f}", file=sys.stderr)


def cmd_build(a: argparse.Namespace) -> int:
    from .build import build
    from .progress import Progress

    prog = Progress()
    result = build(a.target, model=a.model, out=a.out, target_file=a.target_file, model_license=a.model_license,
                   model_license_file=a.model_license_file, progress=prog.step)
    prog.done()
    _report_failures(result.failures)
    if a.json:
        print(json.dumps({"out": str(result.out), "up_to_date": result.up_to_date, "note": result.note,
                          **result.summary}, indent=2))
        return 0
    from .build_summary import render_summary

    print(render_summary(result))
    return 0


def _fleet(a: argparse.Namespace):
    from .deploy.fleet import Fleet, Options
    from .plugin_manager import make_plugin_manager, resolve_target

    pm, failures = make_plugin_manager()
    target = resolve_target(pm, failures, a.target, a.target_file)
    _report_failures(failures)
    build_dir = a.build or Path("q25-build") / target.name
    if not (build_dir / "manifest.json").is_file():
        raise UsageError(f"{build_dir}: no build there (run q25deploy build --target {target.name}, or give --build)")
    opts = Options(hosts=a.host or [], hosts_file=a.hosts_file, build_dir=build_dir, identity=a.identity,
                   known_hosts=a.known_hosts, trust_new_host=a.trust_new_host, remote_root=a.remote_root or "",
                   runtime_bin=a.runtime_bin, jobs=a.jobs, tokenizer_only=getattr(a, "tokenizer_only", False),
                   strict=getattr(a, "strict", False))
    return Fleet(opts, target, pm)


def cmd_fleet(a: argparse.Namespace) -> int:
    from .deploy.fleet import render_results
    from .progress import Progress

    fleet = _fleet(a)
    prog = Progress()
    results = fleet.run(a.command, progress=prog.step)
    prog.done()
    if a.command == "status":
        print(json.dumps(results, indent=2) if a.json else "\n".join(
            f"{r['host']:<28} " + (f"error: {r['error']}" if "error" in r else
                                   f"current {r['current'] or '-'} previous {r['previous'] or '-'}"
                                   f"{'' if r['consistent'] else ' (state and current link disagree)'}")
            for r in results))
        return EXIT_DEPLOY if any("error" in r or not r["consistent"] for r in results) else 0
    if a.json:
        print(json.dumps([r.as_json() for r in results], indent=2))
    else:
        print(render_results(results))
    return 0 if all(r.ok for r in results) else EXIT_DEPLOY


def _load_codec(image_path: str):
    from .codec import Codec
    from .image_reader import read_image_file

    return Codec(read_image_file(image_path))


def cmd_tokenize(a: argparse.Namespace) -> int:
    if a.text is not None and a.file:
        raise UsageError("give TEXT or --file, not both")
    codec = _load_codec(a.image)
    inputs: list[tuple[str, bytes]] = []
    if a.file:
        for fn in a.file:
            try:
                inputs.append((fn, Path(fn).read_bytes()))
            except OSError as e:
                raise UsageError(f"{fn}: cannot read: {e.strerror}") from None
    elif a.text is not None:
        inputs.append(("<arg>", os.fsencode(a.text)))
    else:
        inputs.append(("<stdin>", sys.stdin.buffer.read()))
    results = [(name, codec.encode(data, parse_special=a.special)) for name, data in inputs]
    if a.json:
        if a.file:
            print(json.dumps([{"file": n, "ids": ids} for n, ids in results]))
        else:
            print(json.dumps({"ids": results[0][1]}))
    else:
        for _n, ids in results:
            print(" ".join(map(str, ids)))
    return 0


def cmd_detokenize(a: argparse.Namespace) -> int:
    ids = []
    for s in a.ids:
        try:
            ids.append(int(s, 10))
        except ValueError:
            raise UsageError(f"{s!r} is not a token id") from None
    codec = _load_codec(a.image)
    data = codec.decode(ids, special=a.special)
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()
    return 0


def cmd_runtime_build(a: argparse.Namespace) -> int:
    from .progress import Progress
    from .runtime_build import build_runtime

    prog = Progress()
    prog.step("compiling the C runtime")
    manifest = build_runtime(a.out, cross=a.cross, sanitize=a.sanitize)
    prog.done()
    if a.json:
        print(json.dumps(manifest, indent=2))
    else:
        rt = manifest["runtime"]
        print(f"built q25tok, libq25tok.a and q25tok.h for {rt['target']} with {rt['toolchain']['cc']} in {a.out}")
    return 0


def _positive_pow2(s: str) -> int:
    try:
        v = int(s, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{s!r} is not a number") from None
    if v < 64 or v & (v - 1):
        raise argparse.ArgumentTypeError(f"{v} is not a power of two >= 64")
    return v


def _group(sub, name: str, help: str):
    """A command with sub-commands of its own (``export tokenizer``, ``runtime build``)."""
    parser = sub.add_parser(name, help=help)
    group = parser.add_subparsers(dest="what", metavar="WHAT")
    group.required = True
    return group


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="q25deploy",
        description="Take a Qwen2.5 model (GGUF file or Ollama model) onto Zynq UltraScale+ boards.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"q25deploy {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    sp = sub.add_parser("inspect", help="show a model's metadata, tensors, tokenizer and quant mix",
                        description="Show the catalog of MODEL: metadata, tensor directory, tokenizer summary "
                        "and quant mix. Reads the GGUF header only; tensor data is never read.")
    sp.add_argument("model", metavar="MODEL")
    sp.add_argument("--json", action="store_true", help="print the full catalog as JSON (for scripts)")
    sp.set_defaults(func=cmd_inspect)

    bd = sub.add_parser("build", help="build everything for a target board (the main job)",
                        description="Build the tokenizer image, tensor partitions, memory map, device-tree "
                        "fragment and memory picture for one target into DIR (default q25-build/TARGET), "
                        "atomically, incrementally and reproducibly. Without --model: Ollama's qwen2.5:0.5b "
                        "if present, else the built-in demo model.")
    bd.add_argument("--target", metavar="NAME", help="target board (see `q25deploy targets`)")
    bd.add_argument("--model", metavar="MODEL", help="a .gguf path or an Ollama reference")
    bd.add_argument("--out", metavar="DIR", type=Path, help="output directory (default q25-build/TARGET)")
    bd.add_argument("--target-file", metavar="FILE", help="your own board file (TOML, see docs/boards.md)")
    bd.add_argument("--model-license", metavar="ID",
                    help="the model's licence id for the layer's recipe (default: GGUF general.license)")
    bd.add_argument("--model-license-file", metavar="FILE",
                    help="the model's licence text (default: the Ollama licence layer, or the text q25deploy "
                    "ships for Apache-2.0)")
    bd.add_argument("--json", action="store_true", help="print the build summary as JSON")
    bd.set_defaults(func=cmd_build)

    conn = argparse.ArgumentParser(add_help=False)
    c = conn.add_argument_group("boards and connection")
    c.add_argument("--target", metavar="NAME", help="target board (its SSH defaults, install paths, hooks)")
    c.add_argument("--target-file", metavar="FILE", help="your own board file")
    c.add_argument("--host", action="append", metavar="[USER@]HOST[:PORT]", help="a board (repeatable)")
    c.add_argument("--hosts-file", metavar="F", help="boards, one [user@]host[:port] per line (# comments)")
    c.add_argument("--build", metavar="DIR", type=Path, help="the build to deploy (default q25-build/TARGET)")
    c.add_argument("--identity", metavar="KEY", help="SSH private key")
    c.add_argument("--known-hosts", metavar="FILE", help="known_hosts to check host keys against (default ~/.ssh/known_hosts)")
    c.add_argument("--trust-new-host", action="store_true",
                   help="record an unknown host key in the known_hosts file (a changed key is always refused)")
    c.add_argument("--remote-root", metavar="DIR", default="", help="prefix of every board path (chroots, data partitions, tests); {host}, {port} and "
                   "{user} are replaced per board")
    c.add_argument("--runtime-bin", metavar="FILE", help="upload this q25tok with the release and smoke-test with it")
    c.add_argument("--jobs", type=int, default=4, metavar="N", help="boards in parallel (default 4)")
    c.add_argument("--json", action="store_true", help="per-host results as JSON")
    dp = sub.add_parser("deploy", parents=[conn], help="deploy a build to boards: atomic, verified, rolled back",
                        description="Send the build's release (runtime image, partitions, map) to each board: only "
                        "what the board lacks, staged and sha256-verified on the board, switched by one rename, "
                        "smoke-tested, and rolled back automatically when the smoke test fails.")
    dp.add_argument("--tokenizer-only", action="store_true",
                    help="update only the tokenizer image (refused when its vocabulary differs from the deployed model's)")
    dp.add_argument("--strict", action="store_true", help="a live device tree without the planned regions fails the smoke test")
    dp.set_defaults(func=cmd_fleet)
    sm = sub.add_parser("smoke", parents=[conn], help="smoke-test what is deployed on boards",
                        description="Run q25tok on each board and compare its ids with the host codec's; check "
                        "partition digests and the live device tree's reserved memory.")
    sm.add_argument("--strict", action="store_true", help="a live device tree without the planned regions fails")
    sm.set_defaults(func=cmd_fleet)
    st = sub.add_parser("status", parents=[conn], help="show what is deployed on boards")
    st.set_defaults(func=cmd_fleet)
    rb2 = sub.add_parser("rollback", parents=[conn], help="switch boards back to their previous release")
    rb2.set_defaults(func=cmd_fleet)

    tg = sub.add_parser("targets", help="list target boards and the plugins that provide them",
                        description="List the targets registered by plugins (q25deploy entry points); broken "
                        "plugins are reported on stderr and left out.")
    tg.add_argument("--json", action="store_true", help="print JSON (targets and failed plugins)")
    tg.set_defaults(func=cmd_targets)

    exs = _group(sub, "export", "export tokenizer assets or tensor payloads")
    et = exs.add_parser("tokenizer", help="write the tokenizer assets, PS bundle and Q25TOKRT runtime image",
                        description="Write tokens.jsonl, merges.txt, token_types.bin, chat_template.txt, the PS "
                        "bundle (token_index.bin, token_bytes.bin, merge_table_u32.bin), the Q25TOKRT runtime "
                        "image and manifests into DIR. DIR is replaced atomically.")
    et.add_argument("model", metavar="MODEL")
    et.add_argument("--out", required=True, metavar="DIR", type=Path)
    et.add_argument("--alignment", type=_positive_pow2, default=4096,
                    help="section alignment of the runtime image (power of two, default 4096)")
    et.add_argument("--json", action="store_true", help="print the runtime image manifest as JSON")
    et.set_defaults(func=cmd_export_tokenizer)

    ex2 = exs.add_parser("tensors", help="write one file per tensor, byte-identical to the GGUF payload",
                         description="Write tensors/NAME.bin for every tensor (byte-identical to the GGUF payload, "
                         "copied by the kernel) and tensor_payload_export_manifest.json into DIR.")
    ex2.add_argument("model", metavar="MODEL")
    ex2.add_argument("--out", required=True, metavar="DIR", type=Path)
    ex2.add_argument("--json", action="store_true", help="print the manifest as JSON")
    ex2.set_defaults(func=cmd_export_tensors)

    tk = sub.add_parser("tokenize", help="encode text to token ids with a runtime image",
                        description="Encode raw UTF-8 bytes (TEXT, each --file, or stdin) into token ids exactly "
                        "as llama.cpp's llama_tokenize(add_special=false) does. One output line per input.")
    tk.add_argument("--image", required=True, metavar="IMG", help="a Q25TOKRT runtime image")
    tk.add_argument("--special", action="store_true", help="parse control tokens such as <|im_start|> in the text")
    tk.add_argument("--json", action="store_true", help="print JSON instead of space-separated ids")
    tk.add_argument("--file", action="append", metavar="F", help="encode this file (repeatable)")
    tk.add_argument("text", nargs="?", metavar="TEXT")
    tk.set_defaults(func=cmd_tokenize)

    rts = _group(sub, "runtime", "build the board-side C runtime (q25tok)")
    rb = rts.add_parser("build", help="compile q25tok, libq25tok.a and q25tok.h",
                        description="Compile the C runtime from this installation's sources with its Makefile, "
                        "as the BitBake recipe does: host cc by default, aarch64-linux-gnu-gcc -mcpu=cortex-a53 "
                        "with --cross aarch64, AddressSanitizer+UndefinedBehaviorSanitizer with --sanitize.")
    rb.add_argument("--out", required=True, metavar="DIR", type=Path)
    rb.add_argument("--cross", choices=["aarch64"], help="cross-compile for the Cortex-A53 (Zynq UltraScale+)")
    rb.add_argument("--sanitize", action="store_true", help="host build with ASan and UBSan")
    rb.add_argument("--json", action="store_true", help="print the output manifest as JSON")
    rb.set_defaults(func=cmd_runtime_build)

    dt = sub.add_parser("detokenize", help="write the bytes of token ids",
                        description="Write the bytes of the given token ids to stdout. Control tokens are "
                        "written only with --special.")
    dt.add_argument("--image", required=True, metavar="IMG")
    dt.add_argument("--special", action="store_true", help="also write control tokens' text")
    dt.add_argument("ids", nargs="+", metavar="ID")
    dt.set_defaults(func=cmd_detokenize)
    return p


def exit_code_for(err: Q25Error) -> int:
    for cls, code in EXIT_CODES:
        if isinstance(err, cls):
            return code
    return 1


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except Q25Error as e:
        print(f"q25deploy: error: {_one_line(str(e))}", file=sys.stderr)
        return exit_code_for(e)
    except KeyboardInterrupt:
        print("q25deploy: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return 0
    except Exception as e:  # a bug, not bad input: one line, full trace only on request
        if os.environ.get("Q25DEPLOY_DEBUG"):
            raise
        print(f"q25deploy: internal error: {type(e).__name__}: {_one_line(str(e))} "
              "(set Q25DEPLOY_DEBUG=1 for a traceback)", file=sys.stderr)
        return EXIT_INTERNAL
