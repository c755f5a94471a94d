"""docs/yocto.md is for the people who add the layer to their PetaLinux or Yocto project: it
shows a project on its own MACHINE what to put in a board file (and links docs/boards.md),
says what the kernel must allow for ``q25tok load`` through /dev/mem, and leaves the test
harness's internals (pseudo, tinfoil, sstate, ASSUME_PROVIDED, the codeparser cache) to
docs/contributing.md's BitBake section, where they are kept. Its links reach their pages and
headings."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
# what only the test harness does: a PetaLinux user has nothing to do with any of it
CI_TERMS = ("pseudo", "tinfoil", "sstate", "ASSUME_PROVIDED", "codeparser")
DEVMEM_OPTIONS = ("CONFIG_DEVMEM", "CONFIG_STRICT_DEVMEM", "CONFIG_IO_STRICT_DEVMEM")


def sections(text: str) -> dict[str, str]:
    """``## `` and ``### `` headings → their text up to the next heading of any level."""
    parts = re.split(r"^#{2,3} (.+)$", text, flags=re.M)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts), 2)}


def slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def link_problems(page: Path) -> list[str]:
    """Relative links of ``page`` whose file or heading does not exist."""
    out = []
    for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path) if path else page
        if not dest.is_file():
            out.append(f"{page.name}: {target}: no file {dest}")
        elif anchor and dest.suffix == ".md":
            heads = [m for m in re.findall(r"^#{1,6} (.+)$", dest.read_text(), re.M)]
            if anchor not in {slug(h) for h in heads}:
                out.append(f"{page.name}: {target}: no heading #{anchor} in {dest.name}")
    return out


def user_doc_problems(text: str) -> list[str]:
    """What docs/yocto.md (``text``) lacks or should not have."""
    problems = [f"CI internals: {t}" for t in CI_TERMS if re.search(rf"\b{t}\b", text, re.I)]
    secs = sections(text)
    machine = next((body for head, body in secs.items() if "MACHINE" in head), None)
    if machine is None:
        problems.append("no section on a project's own MACHINE")
    else:
        toml = re.findall(r"```toml\n(.*?)```", machine, re.S)
        if not any(re.search(r"^yocto_machine = \[?\"", b, re.M) and "[[memory.banks]]" in b for b in toml):
            problems.append("the MACHINE section has no board-file example with yocto_machine and the DDR")
        if "](boards.md)" not in machine:
            problems.append("the MACHINE section does not link boards.md")
    devmem = next((body for head, body in secs.items() if "/dev/mem" in head), None)
    if devmem is None:
        problems.append("no section on what the kernel's /dev/mem must allow")
    else:
        problems += [f"the /dev/mem section does not name {o}" for o in DEVMEM_OPTIONS if f"{o}=" not in devmem]
        if not re.search(r"^zcat /proc/config\.gz \| grep .*DEVMEM", devmem, re.M):
            problems.append("the /dev/mem section gives no /proc/config.gz check")
        if "no-map" not in devmem or "System RAM" not in devmem:
            problems.append("the /dev/mem section does not say why a no-map region is allowed")
    return problems


def test_yocto_md_is_for_users():
    assert user_doc_problems((DOCS / "yocto.md").read_text()) == []


def test_the_ci_internals_are_in_contributing_md():
    """Moved, not dropped: contributing.md's BitBake section (its subsections included) holds
    what yocto.md no longer says, and links back to yocto.md."""
    text = (DOCS / "contributing.md").read_text()
    bitbake = text.split("\n## BitBake\n", 1)[1].split("\n## ", 1)[0]
    assert [t for t in CI_TERMS if not re.search(rf"\b{t}\b", bitbake, re.I)] == []
    assert "](yocto.md)" in bitbake


def test_the_yocto_and_contributing_links_resolve():
    problems = [p for page in ("yocto.md", "contributing.md", "boards.md") for p in link_problems(DOCS / page)]
    assert problems == []


def test_the_checks_find_what_the_old_page_had(tmp_path):
    """The page before: CI internals, a bare "needs it in a board file", nothing on /dev/mem."""
    old = (
        "## Include in PetaLinux\n\na project with another name needs it in a board file (`--target-file`)\n\n"
        "### Built and packaged by BitBake\n\nHost tools: Debian's `pseudo`; each `ASSUME_PROVIDED` line says why;"
        " the test reads the configuration back through tinfoil, from empty TMPDIR and sstate.\n"
    )
    assert user_doc_problems(old) == [
        "CI internals: pseudo",
        "CI internals: tinfoil",
        "CI internals: sstate",
        "CI internals: ASSUME_PROVIDED",
        "no section on a project's own MACHINE",
        "no section on what the kernel's /dev/mem must allow",
    ]
    half = '## Your own MACHINE\n\n```toml\nyocto_machine = ["x"]\n```\n\n## The kernel: `/dev/mem`\n\nCONFIG_STRICT_DEVMEM=y\n'
    assert user_doc_problems(half) == [
        "the MACHINE section has no board-file example with yocto_machine and the DDR",
        "the MACHINE section does not link boards.md",
        "the /dev/mem section does not name CONFIG_DEVMEM",
        "the /dev/mem section does not name CONFIG_IO_STRICT_DEVMEM",
        "the /dev/mem section gives no /proc/config.gz check",
        "the /dev/mem section does not say why a no-map region is allowed",
    ]
    page = tmp_path / "page.md"
    page.write_text("[a](boards.md#no-such-heading) [b](gone.md)\n")
    (tmp_path / "boards.md").write_text("# Board files\n")
    assert link_problems(page) == [
        "page.md: boards.md#no-such-heading: no heading #no-such-heading in boards.md",
        f"page.md: gone.md: no file {tmp_path / 'gone.md'}",
    ]
