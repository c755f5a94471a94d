"""Putting a build on boards over SSH: ``transport/`` (the session to a board), ``state/`` (what the
board holds: releases, install dir, lock, residency) and ``ops/`` (deploy, rollback, status, smoke, fleets).

Exports (by module): ``ops.fleet.Fleet``/``ops.options.Options``, ``state.release.release_from_build``, ``ops.deployer.deploy``."""
