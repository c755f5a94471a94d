"""The ids the smoke test expects from the board, one list per smoke prompt
(:data:`q25deploy.tokenizer.prompts.SMOKE_PROMPTS`).

With a build: the ids ``build`` recorded in ``smoke_ids.json`` for its image. A build by an
older q25deploy, or one recorded for other prompts, has them computed by the host codec, read
once in a background thread while the files go to the boards (reading it is Python work the
upload need not wait for). Without
a build: computed by the host codec from the board's own image (see :mod:`.board_release`).
"""

from __future__ import annotations

import threading

from ...builddir import BuildDir
from ...errors import Q25Error
from ...tokenizer.prompts import recorded_ids, smoke_ids


class BuildIds:
    """The expected ids for a build's image (``image_path`` in the build directory), read once
    for all hosts."""

    def __init__(self, build: BuildDir, image_path: str) -> None:
        self.build, self.image_path = build, image_path
        self._ids: list[list[int]] | None = None
        self._lock = threading.Lock()
        self._warming = False

    def _recorded(self) -> list[list[int]] | None:
        record, image = self.build.smoke_ids, self.build.manifest.get(self.image_path)
        return recorded_ids(record, image.sha256) if record is not None and image is not None else None

    def get(self) -> list[list[int]]:
        """The ids (a build directory that fails its schema raises its one-line error)."""
        with self._lock:
            if self._ids is None:
                ids = self._recorded()
                if ids is None:
                    from ...tokenizer.codec import Codec
                    from ...tokenizer.image.reader import open_image

                    with self.build.open(self.image_path) as f:
                        ids = smoke_ids(Codec(open_image(f.read(), name=str(self.build.path / self.image_path))))
                self._ids = ids
            return self._ids

    def warm(self) -> None:
        """Read them in the background, once (while files go to a board: not while connecting
        or preparing, which want the interpreter too). Only a build without recorded ids has
        work to do here."""
        with self._lock:
            if self._warming or self._ids is not None:
                return
            self._warming = True

        def read() -> None:
            try:
                self.get()
            except Q25Error:
                pass  # the smoke test reads them again and reports what is wrong

        threading.Thread(target=read, name="q25-smoke-ids", daemon=True).start()
