"""llama.cpp, the parity reference, in a child process of the tests: ``client`` (what a test
calls, and the crash and hang handling), ``child`` (the process itself), ``frames`` (the wire)."""
