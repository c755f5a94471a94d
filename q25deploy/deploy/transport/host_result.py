"""What one board's deploy, rollback or smoke came to: the result the fleet prints, the JSON
scripts read, and what Ctrl-C (:mod:`.interrupt`) says of a board it stopped."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class HostResult:
    host: str
    ok: bool = False
    bytes_sent: int = 0
    files_sent: int = 0
    files_linked: int = 0
    release: str | None = None
    build_release: str | None = None  # the build's release id (`package`'s artifact's): see Release.build_id
    previous: str | None = None
    smoke: dict | None = None
    rolled_back: bool = False
    residency: dict | None = None  # q25tok load after the switch (see residency.py)
    error: str | None = None
    warnings: list[str] = field(default_factory=list)
    seconds: float | None = None  # how long the board took (set by the fleet)
    interrupted: bool = False  # Ctrl-C (interrupt.py): ``state`` says where this board stopped
    state: str | None = None  # "not changed", "switched", "rolled back" (with ``interrupted``)

    def as_json(self) -> dict:
        return {k: v for k, v in self.__dict__.items()}
