"""The host side of ada, behind the `ada` command.

record/    recording: devices, attach/spawn, rings, transport, drain, detail sinks, manifest
           (imports frida)
cli/       the `ada` command, one module per subcommand; only `ada trace` imports record/, and
           only when it runs, so every reading command works where Frida cannot load
errors.py  TracerError, the one-line error every part reports through the CLI
"""

__version__ = "0.1.0"
