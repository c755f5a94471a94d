"""A board's state as deploy reads and keeps it: releases, the install dir, its lock and owner, residency.
Exports (by module): ``release.release_from_build``, ``boardfiles.BoardFiles``, ``boardlock.board_session``."""
