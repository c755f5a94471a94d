"""The one family of user errors raised by library code.

Library code raises a subclass of :class:`Q25Error` for anything the user can fix (bad
input, a missing model, a board that refuses). The CLI (``q25deploy.cli.app``) is the one place
that turns these into a one-line message and an exit code; nothing else prints or exits.
"""

from __future__ import annotations


class Q25Error(Exception):
    """Base class of every error the user can act on. ``str(err)`` is the one-line message."""


class UsageError(Q25Error):
    """The command line or an option value is wrong."""


class ModelSourceError(Q25Error):
    """A model reference cannot be resolved: no Ollama store, unknown model, missing blob,
    digest or size mismatch."""


class GGUFError(Q25Error):
    """A file is not a GGUF this tool accepts (bad magic, truncated, absurd counts, data out
    of range, unknown type, ...)."""


class TokenizerError(Q25Error):
    """The GGUF's tokenizer is missing, inconsistent, or not one this tool supports."""


class ImageError(Q25Error):
    """A Q25TOKRT runtime image is malformed, of another major version, or corrupt."""


class CodecError(Q25Error):
    """Encoding or decoding failed on the given input (e.g. an out-of-range token id)."""


class OutputError(Q25Error):
    """An output path cannot be written (exists as a file, not writable, ...)."""


class ToolError(Q25Error):
    """A system tool is missing or failed (compiler, emulator, ...)."""


class FitError(Q25Error):
    """The model does not fit the board's memory."""


class BoardFileError(Q25Error):
    """A board file is unreadable or does not match the schema."""


class UnknownTargetError(Q25Error):
    """No plugin provides the requested target."""


class LicenseError(Q25Error):
    """The model's licence cannot be determined for the recipe."""


class DeployError(Q25Error):
    """A board refused, a connection was cut, a verify or smoke test failed."""


class HostKeyError(DeployError):
    """The board's host key is unknown (without --trust-new-host) or changed."""


class PluginError(Q25Error):
    """A board plugin's hook implementation raised: the message names the plugin, the hook,
    the target and the error; only that target's command (or board's check) fails."""


class SchemaError(Q25Error):
    """A file from outside (a build directory, a board's state, a cache index) is malformed or
    unsafe: not JSON, a wrong type, a bad digest, a path that leaves its directory, a symlink."""


class PackageError(Q25Error):
    """A build cannot be packaged (unsafe or inconsistent contents, bad key, bad option)."""


class Interrupted(Q25Error):
    """The user stopped the command (Ctrl-C): exit 130, each board's line says where it stopped."""
