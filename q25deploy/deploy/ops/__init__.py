"""The operations on boards: deploy, rollback, status and the smoke test, one board or a fleet.
Exports (by module): ``fleet.Fleet``, ``options.Options``, ``deployer.deploy``, ``smoke.smoke_test``."""
