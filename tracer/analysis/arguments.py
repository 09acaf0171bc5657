"""Arguments, return values and callers by name: the detail lane's registers and stack window
decoded by each traced function's debug information and the calling convention (both from
the symbols layer, ada.tracer.symbols). Without debug information for a function, the raw
argument registers are shown.
"""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

from ada.atf.format import ARCH_ARM64, ARCH_X86_64
from ada.atf.manifest import Manifest, Module
from ada.atf.reader import DetailEvent
from ada.atf.session import SessionReader

from ..symbols.conventions import Convention
from ..symbols.debuginfo import Function, ModuleDebug, UnknownFormat
from ..symbols.modules import find_module, open_module

RAW_ARGS = 3  # argument registers shown without debug information

@dataclass
class Decoder:
    """A session's functions with their debug information (read when first needed), and its
    modules, for callers."""

    session: SessionReader
    symbols: list[Path] = field(default_factory=list)  # --symbols directories
    notes: list[str] = field(default_factory=list)
    _functions: dict[int, Function | None] = field(default_factory=dict)
    _modules: dict[int, tuple[ModuleDebug | None, int, int]] = field(default_factory=dict)
    _lock: threading.RLock = field(default_factory=threading.RLock)  # workers share it

    def __post_init__(self) -> None:
        manifest = self.session.manifest or Manifest(self.session.path, {})
        process = manifest.process
        self.arch = {"x86_64": ARCH_X86_64, "arm64": ARCH_ARM64}.get(
            str(process.arch), ARCH_X86_64)
        self.convention = Convention(self.arch, process.apple)
        self._module_rows = {m.module_id: m for m in manifest.modules}
        self._addresses: dict[int, tuple[int, int]] = {  # function_id -> (module, address)
            s.function_id: (s.module_id, s.address) for s in manifest.symbols
            if s.address is not None}

    def function(self, function_id: int) -> Function | None:
        """The traced function's debug information, or None (no file, no DWARF for it)."""
        with self._lock:
            return self._function(function_id)

    def _function(self, function_id: int) -> Function | None:
        if function_id not in self._functions:
            fn = None
            if function_id in self._addresses:
                module_id, address = self._addresses[function_id]
                debug, base, _ = self._module(module_id)
                if debug is not None and debug.has_dwarf:
                    fn = debug.function(address - base + debug.load_base)
            self._functions[function_id] = fn
        return self._functions[function_id]

    def _module(self, module_id: int) -> tuple[ModuleDebug | None, int, int]:
        if module_id in self._modules:
            return self._modules[module_id]
        row = self._module_rows.get(module_id) or Module(module_id)
        base, size = row.base, row.size
        debug = None
        path = find_module([row.file, row.path], self.symbols)
        if path is None:
            if module_id in self._module_rows:
                self.notes.append(f"{row.name}: its file is not here "
                                  f"({row.path}); --symbols DIR points at a copy")
        else:
            try:
                debug = open_module(path, self.symbols)
            except UnknownFormat as e:
                self.notes.append(f"{e}: raw registers shown")
            except Exception as e:  # noqa: BLE001 (unreadable, damaged...)
                self.notes.append(f"{path}: cannot read its debug information ({e})")
            else:
                if not debug.has_dwarf:
                    self.notes.append(f"{row.name}: no debug information "
                                      f"(raw registers shown; build with -g, or give its "
                                      f"split debug file's directory with --symbols)")
        self._modules[module_id] = (debug, base, size)
        return self._modules[module_id]

    # --- what the reading commands show ----------------------------------------------

    def call_values(self, function_id: int, event: DetailEvent
                    ) -> tuple[list[tuple[str, str]], bool]:
        """(each argument's name and value, whether they are named): without debug info,
        the first raw registers, as `arg1`..."""
        fn = self.function(function_id)
        if fn is None:
            return [(f"arg{i + 1}", f"0x{r:x}") for i, r in enumerate(event.regs[:RAW_ARGS])], \
                False
        return self.convention.arguments(fn, event.regs, event.stack, event.strings), True

    def call_text(self, function_id: int, event: DetailEvent) -> str:
        """`a=3, b=6`, or the raw registers (`0x3, 0x6, 0x0`) without debug info."""
        values, named = self.call_values(function_id, event)
        if not named:
            return ", ".join(value for _, value in values)
        fn = self.function(function_id)
        return ", ".join(f"{name}={value}" for name, value in values) + \
            (", ..." if fn is not None and fn.variadic else "")

    def return_text(self, function_id: int, event: DetailEvent) -> str | None:
        fn = self.function(function_id)
        if fn is None:
            value = event.return_value
            return None if value is None else f"0x{value:x}"
        return self.convention.result(fn, event.regs)

    def caller(self, address: int) -> str | None:
        """`main+0x1c (demo.c:42)` for a return address, from the module holding it."""
        with self._lock:
            return self._caller(address)

    def _caller(self, address: int) -> str | None:
        for module_id, row in self._module_rows.items():
            base, size = row.base, row.size
            if base <= address < base + size:
                debug = self._module(module_id)[0]
                if debug is None:
                    return None
                file_address = address - base + debug.load_base
                where, line = debug.where(file_address)
                place = debug.line(file_address - 1) if debug.has_dwarf else None
                text = where or f"{row.name}+0x{address - base:x}"
                if place:
                    text += f" ({Path(place[0]).name}:{place[1]})"
                return text
        return None

    def save(self) -> None:
        for debug, _, _ in self._modules.values():
            if debug is not None:
                debug.save()

    def say_notes(self) -> None:
        """What could not be decoded, once each, on stderr."""
        for note in dict.fromkeys(self.notes):
            print(f"ada: note: {note}", file=sys.stderr)
