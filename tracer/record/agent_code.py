"""The code ada loads into the target, read from agent/ (the `ada.agent` package data).

The agent is one script and its hot path one C source, each joined from files that hold one
concern apiece (agent/): JavaScript files concatenated in order (no bundler: each adds its
methods to AdaAgent), and C files joined into one translation unit, so the compiler inlines
across them as it did when they were one file.
"""

from __future__ import annotations

from importlib import resources

AGENT_SCRIPTS = ("ada_messages.js", "ada_selection.js", "ada_code.js", "ada_inline.js",
                 "ada_inline_x64.js", "ada_inline_arm64.js", "ada_platform.js", "ada_hooking.js",
                 "ada_transport.js", "ada_ending.js", "ada_agent.js")  # one script, in order
HOT_PATH_SOURCES = ("ada_layout.h", "ada_platform.c", "ada_control.c", "ada_hold.c",
                    "ada_rings.c", "ada_interceptor.c", "ada_inline.c", "ada_watch.c")  # one C source, in order


def _joined(names: tuple[str, ...]) -> str:
    pkg = resources.files("ada.agent")
    return "\n".join(pkg.joinpath(name).read_text(encoding="utf-8") for name in names)


def agent_script() -> str:
    """The agent's JavaScript, its files joined into one script."""
    return _joined(AGENT_SCRIPTS)


def hot_path_source() -> str:
    """The C hot path the agent compiles (CModule), its files joined into one source."""
    return _joined(HOT_PATH_SOURCES)


def agent_sources() -> tuple[str, str]:
    """(agent_script(), hot_path_source())."""
    return agent_script(), hot_path_source()
