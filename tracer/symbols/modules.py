"""A traced module's file and debug information on this machine, and what recording asks of
them: which parameters of the functions about to be hooked are C strings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ada.atf.format import ARCH_ARM64, ARCH_X86_64

from .conventions import Convention
from .debuginfo import ModuleDebug

def find_module(paths: list[Any], symbols: list[Path] | tuple[Path, ...] = ()) -> Path | None:
    """A module's file on this machine: a copy by file name in `symbols` first (a trace from
    another machine), then the module's own path(s)."""
    names = [Path(p) for p in paths if p]
    for candidate in [d / n.name for d in symbols for n in names] + names:
        if candidate.is_file():
            return candidate
    return None


def open_module(path: Path, symbols: list[Path] | tuple[Path, ...] = ()) -> ModuleDebug:
    """A module's debug information, with its DWARF from a separate file when the module has
    none (ModuleDebug.split_debug_names): looked for in `symbols`, beside the module (a
    dSYM), then in /usr/lib/debug (where distributions put split debug files)."""
    debug = ModuleDebug(path)
    if debug.has_dwarf:
        return debug
    for d in [*symbols, path.parent, Path("/usr/lib/debug")]:
        for name in debug.split_debug_names():
            if (d / name).is_file():
                debug.close()
                return ModuleDebug(path, d / name)
    return debug


def string_slots(functions: list[dict[str, Any]], arch: str,
                 symbols: list[Path] | tuple[Path, ...] = ()) -> dict[str, int]:
    """{function_id: mask of the regs[] slots holding `char *` parameters} for functions as
    the agent finds them (modulePath, moduleBase, address, functionId); a module's file is
    looked for by name in `symbols` first (a phone's libraries copied to this machine), then
    at its path. Functions without debug information are left out."""
    convention = Convention({"x64": ARCH_X86_64, "x86_64": ARCH_X86_64,
                             "arm64": ARCH_ARM64}.get(arch, ARCH_X86_64))
    modules: dict[str, ModuleDebug | None] = {}
    out = {}
    for f in functions:
        path = f.get("modulePath")
        if path not in modules:
            found = find_module([path], symbols)
            try:
                modules[path] = open_module(found, symbols) if found is not None else None
            except Exception:  # noqa: BLE001 (unreadable: no strings to capture)
                modules[path] = None
        debug = modules[path]
        if debug is None or not debug.has_dwarf:
            continue
        fn = debug.function(int(f["address"], 16) - int(f["moduleBase"], 16) + debug.load_base)
        mask = convention.string_slots(fn) if fn is not None else 0
        if mask:
            out[f["functionId"]] = mask
    for debug in modules.values():
        if debug is not None:
            debug.save()
    return out
