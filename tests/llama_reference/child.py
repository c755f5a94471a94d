"""The child process that runs llama.cpp (llama-cpp-python) for the tests.

Started by :class:`llama_reference.client.LlamaReference`; reads framed requests on stdin and answers
on the descriptor that was stdout (stdout itself is pointed at stderr, so nothing llama.cpp
prints can corrupt an answer). A crash here ends this process, never the test session.
"""

from __future__ import annotations

import os
import sys
import time
import traceback

from llama_reference.frames import read_frame, write_frame


def main() -> int:
    answers = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    requests = os.fdopen(0, "rb", buffering=0)
    import llama_cpp
    import numpy as np

    info = llama_cpp.llama_print_system_info().decode(errors="replace").strip()
    write_frame(answers, ("hello", {"version": llama_cpp.__version__, "system_info": info}))
    models: dict = {}

    def model(path: str, params: tuple):
        key = (path, params)
        if key not in models:
            models[key] = llama_cpp.Llama(model_path=path, verbose=False, **dict(params))
        return models[key]

    def logits(llm, ids: list[int]):
        llm.reset()
        llm.eval(ids)
        return np.array(llm.scores[: len(ids)], np.float32)

    def greedy(llm, ids: list[int], steps: int):
        llm.reset()
        llm.eval(ids)
        tokens, rows = [], []
        for _ in range(steps):
            row = np.array(llm.scores[llm.n_tokens - 1], np.float32)
            tokens.append(int(np.argmax(row)))
            rows.append(row)
            llm.eval([tokens[-1]])
        return tokens, np.stack(rows)

    calls = {
        "tokenize": lambda llm, data, add_bos, special: llm.tokenize(data, add_bos=add_bos, special=special),
        "detokenize": lambda llm, ids, special: llm.detokenize(ids, special=special),
        "logits": logits,
        "greedy": greedy,
    }
    while True:
        request = read_frame(requests)
        if request is None:
            return 0
        what, args = request
        try:
            if what == "call":
                path, params, name, call_args = args
                result = calls[name](model(path, params), *call_args)
            elif what == "sleep":  # a hang, for the tests of the client's bounded wait
                time.sleep(args)
                result = None
            else:
                raise ValueError(f"unknown request {what!r}")
        except Exception:
            write_frame(answers, ("error", traceback.format_exc()))
        else:
            write_frame(answers, ("ok", result))


if __name__ == "__main__":
    sys.exit(main())
