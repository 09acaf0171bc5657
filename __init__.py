"""ada: a function tracer for native code, built on Frida.

Installed as one package so its parts cannot collide with other projects' modules:
`ada.atf` reads and writes ATF v2 traces (no Frida), `ada.tracer` records (`ada.tracer.record`)
and reads (`ada.tracer.analysis`) them behind the `ada` command (`ada.tracer.cli`), and
`ada.agent` is the code that runs inside the target. `python -m ada` is the `ada` command.
"""

from .tracer import __version__

__all__ = ["__version__"]
