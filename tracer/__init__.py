"""The host side of ada, behind the `ada` command.

symbols/   what the program's files say: debug information, calling conventions, C++ names;
           the layer record/ and analysis/ both stand on (imports neither)
record/    recording: devices, attach/spawn, rings, transport, drain, detail sinks, manifest
           (imports frida)
analysis/  reading: calls table, report, replay, graph, exports, SQL (never imports frida)
cli/       the `ada` command, one module per subcommand; only `ada trace` imports record/, and
           only when it runs, so every reading command works where Frida cannot load
errors.py  TracerError, the one-line error every part reports through the CLI
"""

__version__ = "0.1.0"
