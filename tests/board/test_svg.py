"""memory-map.svg: checked from its geometry (every text box inside the canvas, none
overlapping another) and by rendering it with rsvg-convert (librsvg2-bin)."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
import zlib
from dataclasses import replace
from pathlib import Path

import pytest
from requirements import need_program
from tensor_dirs import model

from q25deploy.board.boardfile import Span, load_board
from q25deploy.board.plan import MemoryPlan, Region, plan_memory
from q25deploy.board.svg import memory_svg
from q25deploy.board.svglayout import ASCENT, DESCENT, text_width
from q25deploy.resources import data_dir

SVG = "{http://www.w3.org/2000/svg}"
BOARDS = ("kv260", "zcu104", "qemu")
PRESETS = ("tiny", "0.5b", "1.5b")
RSVG = "apt-get install librsvg2-bin"


def board(name: str):
    return load_board(data_dir("targets") / f"{name}.toml")


def crowded() -> tuple:
    """Dozens of regions of mixed sizes (2 MiB to 1 GiB, 3.1 GiB in all) in the qemu bank, as a plugin might
    place them: contiguous runs, gaps, one region just above the board's reservation."""
    b = board("qemu")
    regions, top = [], 0x140000000
    sizes = [2 << 20, 8 << 20, 34 << 20, 2 << 20, 256 << 20, 4 << 20] * 6 + [1 << 30]
    for i, size in enumerate(sizes):
        top -= size + (64 << 20 if i % 7 == 6 else 0)
        regions.append(Region(i, top, size, size * 3 // 4, "ram"))
    regions.append(Region(len(regions), 0x48000000, 2 << 20, 1 << 20, "ram"))
    return b, MemoryPlan(tuple(regions), (), b.model_budget)


def cases():
    for name in BOARDS:
        for preset in PRESETS:
            yield pytest.param(name, preset, id=f"{name}-{preset}")


def picture(name: str, preset: str, residency=None) -> tuple:
    if name == "crowded":
        b, plan = crowded()
    else:
        b = board(name)
        plan = plan_memory(model(preset), b)
    return b, plan, memory_svg(b, plan, residency)


def text_boxes(root: ET.Element) -> list[tuple[str, float, float, float, float]]:
    """(text, left, top, right, bottom) of every text element: width from the monospace advance."""
    default = float(root.get("font-size"))
    out = []
    for t in root.iter(f"{SVG}text"):
        s, size = "".join(t.itertext()), float(t.get("font-size", default))
        x, y = float(t.get("x")), float(t.get("y"))
        assert t.get("text-anchor") in (None, "start")
        out.append((s, x, y - ASCENT * size, x + text_width(s, size), y + DESCENT * size))
    return out


def check_layout(svg: str) -> ET.Element:
    root = ET.fromstring(svg)
    w, h = float(root.get("width")), float(root.get("height"))
    boxes = text_boxes(root)
    for s, left, top, right, bottom in boxes:
        assert 0 <= left and right <= w and 0 <= top and bottom <= h, f"{s!r} leaves the {w}x{h} canvas"
    boxes.sort(key=lambda b: b[1])
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            if b[1] >= a[3]:
                break
            assert not (a[2] < b[4] and b[2] < a[4]), f"{a[0]!r} overlaps {b[0]!r}"
    for r in root.iter(f"{SVG}rect"):
        x, y = float(r.get("x", 0)), float(r.get("y", 0))
        assert 0 <= x and x + float(r.get("width")) <= w + 0.05 and 0 <= y and y + float(r.get("height")) <= h
    return root


def test_svg_draws_banks_reservations_regions_and_partitions():
    b = board("kv260")
    b = replace(b, layout=replace(b.layout, region_max_size=256 << 20))
    plan = plan_memory(model("1.5b"), b)
    root = check_layout(memory_svg(b, plan))
    classes = [r.get("class") for r in root.iter(f"{SVG}rect")]
    assert classes.count("bank") == 2 == classes.count("bank-scale")
    assert classes.count("existing") == len(b.reserved) == classes.count("existing-scale")
    assert classes.count("region") == len(plan.regions) == classes.count("partition")
    text = [t for t, *_ in text_boxes(root)]
    for r in plan.regions:
        assert f"{r.label} @0x{r.base:x} {fmt(r.size)}, {fmt(r.used)} used" in text
    assert "pmu @0x7ff00000 1 MiB" in text and "ddr-high: 0x800000000-0x87fffffff (2 GiB)" in text
    assert "tf-a @0x0 512 KiB" in text and "boot-load-area @0x0 1 GiB" in text
    assert "0x840000000" in text  # address ticks on the bar to scale


def fmt(n: int) -> str:
    from q25deploy.common import format_size

    return format_size(n)


@pytest.mark.parametrize("name,preset", list(cases()))
def test_labels_inside_the_canvas_and_apart(name, preset):
    b, plan, svg = picture(name, preset)
    root = check_layout(svg)
    assert len(list(root.iter(f"{SVG}text"))) >= len(plan.regions) + len(b.reserved)


def test_small_spans_are_drawn_wide_enough_to_see():
    """An 8 MiB region in a 2 GiB bank (the tiny model on the KV260) gets a block, a
    reservation nested in another (tf-a in boot-load-area) too."""
    b, plan, svg = picture("kv260", "tiny")
    root = ET.fromstring(svg)
    for r in root.iter(f"{SVG}rect"):
        if r.get("class") in ("region", "existing"):
            assert float(r.get("width")) >= 30, r.find(f"{SVG}title").text


def test_dozens_of_regions_stay_legible():
    b, plan, svg = picture("crowded", "")
    root = check_layout(svg)
    assert len(plan.regions) >= 30
    regions = [r for r in root.iter(f"{SVG}rect") if r.get("class") == "region"]
    assert len(regions) == len(plan.regions) and min(float(r.get("width")) for r in regions) >= 10
    assert len({t for t, *_ in text_boxes(root) if t.startswith("q25_region")}) == len(plan.regions)


def test_residency_colours_regions_and_adds_a_legend():
    b, plan, _ = picture("crowded", "")
    residency = {r.index: ("resident", "missing", "differs")[r.index % 3] for r in plan.regions[1:]}
    root = check_layout(memory_svg(b, plan, residency))
    text = [t for t, *_ in text_boxes(root)]
    for r in plan.regions:
        assert any(t.startswith(f"{r.label} @") and t.endswith(", " + residency.get(r.index, "unknown")) for t in text)
    fills = {r.get("fill") for r in root.iter(f"{SVG}rect") if r.get("class") == "region"}
    assert len(fills) == 4  # resident, missing, differs, unknown (region 0)
    for key in ("region resident", "region missing", "region differs", "region not read back / unknown"):
        assert key in text
    plain = [t for t, *_ in text_boxes(ET.fromstring(memory_svg(b, plan)))]
    assert "region resident" not in plain and "q25 region (reserved)" in plain


def test_a_status_picture_is_titled_with_its_host_release_and_time():
    b, plan, _ = picture("crowded", "")
    heading = "root@127.0.0.1:2222 (qemu): release 20260101-abc, 2026-12-02 06:30:00 UTC"
    text = [t for t, *_ in text_boxes(check_layout(memory_svg(b, plan, {}, heading)))]
    assert text[0] == heading and not any(t.startswith(f"{b.name}: ") for t in text)


def test_board_text_is_escaped():
    b = board("zcu104")
    odd = "a&b <c> \"d'"
    b = replace(
        b,
        description=odd,
        banks=(replace(b.banks[0], name=odd),),
        reserved=b.reserved + (Span(odd, 0x7FE00000, 0x100000),),
    )
    plan = plan_memory(model("tiny"), b)
    svg = memory_svg(b, plan)
    root = check_layout(svg)
    assert root.find(f"{SVG}g").get("id") == f"bank-{odd}"
    text = [t for t, *_ in text_boxes(root)]
    assert f"zcu104: {odd}" in text and f"{odd} @0x7fe00000 1 MiB" in text


def test_a_plan_without_regions_still_draws_the_board():
    b = board("kv260")
    root = check_layout(memory_svg(b, MemoryPlan((), (), b.model_budget)))
    assert [r.get("class") for r in root.iter(f"{SVG}rect")].count("region") == 0
    assert "q25: no regions" in [t for t, *_ in text_boxes(root)]


def test_output_is_deterministic():
    b, plan, svg = picture("kv260", "1.5b", {0: "resident"})
    assert memory_svg(b, plan, {0: "resident"}) == svg
    code = (
        "import sys; sys.path[:0] = ['tests', 'tests/board']; from test_svg import picture; "
        "sys.stdout.write(picture('kv260', '1.5b', {0: 'resident'})[2])"
    )
    root = Path(__file__).parents[2]
    env = dict(os.environ, PYTHONHASHSEED="12345")
    out = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, check=True)
    assert out.stdout == svg
    assert "id=" not in svg.replace('<g id="bank-', "")


# ---- rendering ---------------------------------------------------------------------------


def render(svg: str, tmp_path: Path) -> bytes:
    rsvg = need_program("rsvg-convert", RSVG)
    src = tmp_path / "m.svg"
    src.write_text(svg)
    return subprocess.run([rsvg, "-f", "png", str(src)], capture_output=True, check=True).stdout


def png(data: bytes) -> tuple[int, int, list[bytes], int]:
    """A decoded 8-bit RGB/RGBA PNG (what rsvg-convert writes): width, height, rows, bytes per pixel."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks = 8, {}
    while pos < len(data):
        n = int.from_bytes(data[pos : pos + 4], "big")
        chunks.setdefault(data[pos + 4 : pos + 8], []).append(data[pos + 8 : pos + 8 + n])
        pos += 12 + n
    ihdr = chunks[b"IHDR"][0]
    w, h, depth, ctype, interlace = (
        int.from_bytes(ihdr[:4], "big"),
        int.from_bytes(ihdr[4:8], "big"),
        ihdr[8],
        ihdr[9],
        ihdr[12],
    )
    assert depth == 8 and ctype in (2, 6) and interlace == 0
    bpp = 4 if ctype == 6 else 3
    raw, stride, rows, prev = zlib.decompress(b"".join(chunks[b"IDAT"])), w * bpp, [], bytearray(w * bpp)
    for y in range(h):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride) if f else ():
            a, b, c = (line[i - bpp] if i >= bpp else 0), prev[i], (prev[i - bpp] if i >= bpp else 0)
            if f == 4:
                p = a + b - c
                a = (
                    a
                    if abs(p - a) <= abs(p - b) and abs(p - a) <= abs(p - c)
                    else (b if abs(p - b) <= abs(p - c) else c)
                )
            line[i] = (line[i] + {1: a, 2: b, 3: (a + b) // 2, 4: a}[f]) & 255
        rows.append(bytes(line))
        prev = line
    return w, h, rows, bpp


def ink(rows: list[bytes], bpp: int) -> list[tuple[int, int]]:
    """(x, y) of every pixel that is not (nearly) white or transparent."""
    out = []
    for y, row in enumerate(rows):
        for x in range(0, len(row), bpp):
            px = row[x : x + bpp]
            if (bpp == 3 or px[3] > 40) and min(px[:3]) < 200:
                out.append((x // bpp, y))
    return out


@pytest.mark.parametrize("name,preset", [("kv260", "tiny"), ("zcu104", "1.5b"), ("qemu", "0.5b"), ("crowded", "")])
def test_renders_to_a_png_of_the_canvas_size(name, preset, tmp_path):
    *_, svg = picture(name, preset, {0: "resident"} if name == "crowded" else None)
    data = render(svg, tmp_path)
    root = ET.fromstring(svg)
    assert int.from_bytes(data[16:20], "big") == int(root.get("width"))
    assert int.from_bytes(data[20:24], "big") == int(root.get("height"))
    assert len(data) > 5000


@pytest.mark.parametrize("name,preset", [("kv260", "1.5b"), ("crowded", "")])
def test_rendered_text_stays_in_its_estimated_box(name, preset, tmp_path):
    """The text alone, rendered in black: every inked pixel lies in the box estimated from the
    monospace advance (± 1 px of antialiasing) — the estimate the layout relies on holds for
    the font librsvg picks."""
    *_, svg = picture(name, preset)
    root = ET.fromstring(svg)
    boxes = text_boxes(root)
    only = ET.Element(root.tag, root.attrib)
    for t in root.iter(f"{SVG}text"):
        t.attrib.pop("stroke", None)
        t.set("fill", "#000000")
        only.append(t)
    ET.register_namespace("", SVG[1:-1])
    w, h, rows, bpp = png(render(ET.tostring(only, encoding="unicode"), tmp_path))
    allowed = [bytearray(w) for _ in range(h)]
    for _, left, top, right, bottom in boxes:
        for y in range(max(int(top) - 1, 0), min(int(bottom) + 2, h)):
            allowed[y][max(int(left) - 1, 0) : min(int(right) + 2, w)] = b"\1" * (
                min(int(right) + 2, w) - max(int(left) - 1, 0)
            )
    pixels = ink(rows, bpp)
    assert len(pixels) > 1000
    stray = [(x, y) for x, y in pixels if not allowed[y][x]]
    assert not stray, f"{len(stray)} inked pixels outside every text box, e.g. {stray[:5]}"
