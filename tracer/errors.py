"""TracerError: a problem with the target, the device or the user's input, told in one line.

Frida-free, so that every command can report errors where Frida cannot load; the recorder turns
frida's own exceptions into it (tracer.record.frida_errors).
"""

from __future__ import annotations


class TracerError(Exception):
    """Reported by the CLI as `ada <command>: error: <message>` with exit status 1."""
