"""Deploy errors (mapped to exit codes in q25deploy.cli)."""

from ..errors import Q25Error


class DeployError(Q25Error):
    """A board refused, a connection was cut, a verify or smoke test failed."""


class HostKeyError(DeployError):
    """The board's host key is unknown (without --trust-new-host) or changed."""
