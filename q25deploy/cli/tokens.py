"""The commands that run the host codec on a Q25TOKRT runtime image: ``tokenize`` and
``detokenize``."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from ..errors import UsageError


def add_commands(sub) -> None:
    """Add tokenize and detokenize to the CLI's sub-parsers."""
    tk = sub.add_parser(
        "tokenize",
        help="encode text to token ids with a runtime image",
        description="Encode raw UTF-8 bytes (TEXT, each --file, or stdin) into token ids exactly "
        "as llama.cpp's llama_tokenize(add_special=false) does. One output line per input.",
    )
    tk.add_argument("--image", required=True, metavar="IMG", help="a Q25TOKRT runtime image")
    tk.add_argument("--special", action="store_true", help="parse control tokens such as <|im_start|> in the text")
    tk.add_argument("--json", action="store_true", help="print JSON instead of space-separated ids")
    tk.add_argument("--file", action="append", metavar="F", help="encode this file (repeatable)")
    tk.add_argument(
        "text", nargs="?", metavar="TEXT", help="the text to encode (default: stdin; not together with --file)"
    )
    tk.set_defaults(func=cmd_tokenize)

    dt = sub.add_parser(
        "detokenize",
        help="write the bytes of token ids",
        description="Write the bytes of the given token ids to stdout. Control tokens are written only with --special.",
    )
    dt.add_argument("--image", required=True, metavar="IMG", help="a Q25TOKRT runtime image")
    dt.add_argument("--special", action="store_true", help="also write control tokens' text")
    dt.add_argument("ids", nargs="+", metavar="ID", help="token ids (decimal)")
    dt.set_defaults(func=cmd_detokenize)


def _load_codec(image_path: str):
    from ..tokenizer.codec import Codec
    from ..tokenizer.image.reader import read_image_file

    return Codec(read_image_file(image_path))


def _inputs(a: argparse.Namespace) -> list[tuple[str, bytes]]:
    """(name, raw bytes) of each input: every --file, else TEXT, else stdin."""
    if a.file:
        inputs = []
        for fn in a.file:
            try:
                inputs.append((fn, Path(fn).read_bytes()))
            except OSError as e:
                raise UsageError(f"{fn}: cannot read: {e.strerror}") from None
        return inputs
    if a.text is not None:
        return [("<arg>", os.fsencode(a.text))]
    return [("<stdin>", sys.stdin.buffer.read())]


def cmd_tokenize(a: argparse.Namespace) -> int:
    if a.text is not None and a.file:
        raise UsageError("give TEXT or --file, not both")
    codec = _load_codec(a.image)
    inputs = _inputs(a)
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
