"""The host side of ada: devices, attach/spawn, transport, drain thread, manifest, CLI."""
