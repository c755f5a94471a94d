"""Imported first by conftest.py: OpenBLAS's threads and kernels pinned before numpy loads, as
the q25deploy program pins them (q25deploy/numerics.py: byte-identical forward records)."""

from q25deploy.numerics import pin

pin()
