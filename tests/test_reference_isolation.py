"""llama.cpp runs in a child process of the tests (tests/llama_reference/): a crash or a hang
there fails the one test that met it, with the signal and the library's system info, and the
tests after it run."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent
VOCAB = TESTS / "data" / "ggml-vocab-qwen2.gguf"

CONFTEST = f"""
import sys
sys.path.insert(0, {str(TESTS)!r})
import pytest
from llama_reference.client import LlamaReference

@pytest.fixture(scope="module")
def llama_reference():
    ref = LlamaReference()
    yield ref
    ref.close()
"""

TESTS_OF_A_MODULE = f"""
import os, signal

VOCAB = {str(VOCAB)!r}

def test_segfault(llama_reference):
    m = llama_reference.model(VOCAB, vocab_only=True)
    assert m.tokenize(b"Hello") == [9707]
    os.kill(llama_reference.pid, signal.SIGSEGV)
    m.tokenize(b"Hello")

def test_after_the_crash(llama_reference):
    assert llama_reference.model(VOCAB, vocab_only=True).tokenize(b"Hello world") == [9707, 1879]

def test_hang(llama_reference):
    llama_reference.call_seconds = 2
    llama_reference.request("sleep", 60)

def test_after_the_hang(llama_reference):
    llama_reference.call_seconds = 60
    assert llama_reference.model(VOCAB, vocab_only=True).detokenize([9707]) == b"Hello"
"""


def test_a_crash_or_hang_of_llama_cpp_fails_one_test_and_the_rest_run(llama_reference, pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_inner=TESTS_OF_A_MODULE)
    r = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q", timeout=300)
    r.assert_outcomes(passed=2, failed=2)
    out = r.stdout.str()
    assert "FAILED test_inner.py::test_segfault" in out and "FAILED test_inner.py::test_hang" in out, out
    assert "child process: the child ended during 'call' (killed by SIGSEGV)" in out, out
    assert "child process: no answer to 'sleep' in 2 s: the child was killed" in out, out
    assert "system info: " in out and "CPU :" in out  # the library's own line, in the failure
