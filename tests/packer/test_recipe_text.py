from __future__ import annotations

from q25deploy.packer.recipe_text import MAX_CHARS, bitbake_text, replaced_note


def test_plain_names_pass_unchanged():
    assert bitbake_text("Qwen2.5 0.5B Instruct (q4_k_m) 通义千问") == ("Qwen2.5 0.5B Instruct (q4_k_m) 通义千问", False)
    assert replaced_note("model name", False) == ""


def test_what_bitbake_would_evaluate_or_split_is_replaced():
    safe, changed = bitbake_text('q\n${@bb.utils.mkdirhier("/tmp/x")}\\')
    assert changed and safe == "q__{@bb.utils.mkdirhier(_/tmp/x_)}_"
    assert not set('"\\$\n`') & set(safe)
    assert replaced_note("model name", True).startswith("# ") and replaced_note("model name", True).count("\n") == 1


def test_long_names_are_cut():
    safe, changed = bitbake_text("x" * 500)
    assert changed and len(safe) == MAX_CHARS
