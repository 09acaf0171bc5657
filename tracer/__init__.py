"""The host side of ada: devices, attach/spawn, transport, drain thread, manifest, CLI."""

__version__ = "0.1.0"
