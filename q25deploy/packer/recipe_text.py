"""Text from a model (its name, its reference) made safe for a BitBake recipe or a Markdown
README, never pasted: a value between double quotes in a recipe must not end the string,
continue the line, or start an expansion (``${VAR}``, ``${@python}``) that BitBake would
evaluate on the build host."""

from __future__ import annotations

MAX_CHARS = 120
_UNSAFE = set('"\\$`')  # quote, line continuation, expansion; backquote (shell in tasks)


def bitbake_text(text: str) -> tuple[str, bool]:
    """``(safe, changed)``: ``text`` with every character that is not printable or is unsafe in a
    double-quoted BitBake value replaced by ``_``, at most :data:`MAX_CHARS` characters."""
    safe = "".join(c if c.isprintable() and c not in _UNSAFE else "_" for c in text)[:MAX_CHARS]
    return safe, safe != text


def replaced_note(what: str, changed: bool) -> str:
    """The recipe comment that says a value was made safe (empty when it was not changed)."""
    return (
        f"# q25deploy: the {what} has characters a recipe cannot hold safely; they are shown as '_'\n"
        if changed
        else ""
    )
