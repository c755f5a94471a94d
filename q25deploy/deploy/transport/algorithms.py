"""The ciphers and MACs a board session offers, first choice first: paramiko's and OpenSSH's
``ssh`` (which gets those it knows, see :mod:`.openssh`). Standard library only."""

from __future__ import annotations

# Ciphers and MACs: chosen by measuring on the emulated A53 board (bench/bench_ssh_transport.py,
# issue 11 defect 7; figures in docs/boards.md). AES-GCM first: encryption and integrity in
# one C call per packet, the fastest upload and least board CPU. Dropbear (2022.83 to 2025.88)
# is built without GCM and paramiko has no chacha20-poly1305, so with dropbear it is CTR +
# HMAC: aes128-ctr before aes256-ctr (less board CPU); hmac-sha1 measured no cheaper than
# hmac-sha2-256 there, so SHA-2 comes first (dropbear 2025.88 drops hmac-sha1 by default);
# encrypt-then-MAC first for servers that have it. Compression off: weights do not compress
# and zlib would cost the board's CPU.
CIPHERS = ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com", "aes128-ctr", "aes256-ctr", "aes192-ctr")
MACS = ("hmac-sha2-256-etm@openssh.com", "hmac-sha2-256", "hmac-sha2-512-etm@openssh.com", "hmac-sha2-512", "hmac-sha1")
