"""Putting a build on boards over SSH (fabric): releases, the transfer, the switch and rollback,
the on-board smoke test, and fleets of boards at once.

Exports (by module): ``fleet.Fleet``/``Options``, ``release.release_from_build``, ``deployer.deploy``."""
