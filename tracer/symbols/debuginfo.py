"""What a module's own debug information says about its functions: each traced function's
parameters and return type (DWARF, read with pyelftools; from ELF files, and from Mach-O files
through macho.py), and for any address, the function it is in (+offset) and its source line.
Nothing is written by the user.

A module is found by its path in the manifest, or by its file name in `--symbols` directories,
for traces taken on another machine; DWARF kept apart is found as a split debug file (by GNU
build id, `.build-id/xx/yyyy.debug`, or NAME.debug) or a dSYM (NAME.dSYM/Contents/Resources/
DWARF/NAME). Addresses are turned into the file's own: runtime - base + the lowest PT_LOAD
vaddr (ELF) or the __TEXT segment's address (Mach-O).

DWARF is read only for the compile units that hold the addresses asked about (through
.debug_aranges, or each unit's pc range), and what was found is kept in a cache per module
build (path, size and build id) under $XDG_CACHE_HOME/ada/debuginfo, so the next command does
not parse it again. A function found through a clone (`foo.constprop.0`, `foo.isra.0`) or an
out-of-line copy of an inline function takes its names and types from DW_AT_abstract_origin,
and the parameters the clone itself lists (a constant-propagated one is gone from its ABI).
"""

from __future__ import annotations

import bisect
import hashlib
import os
import pickle
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .macho import MachO, is_macho
from .names import demangle

# DW_ATE_* base type encodings
ATE_BOOLEAN, ATE_COMPLEX, ATE_FLOAT, ATE_SIGNED, ATE_SIGNED_CHAR = 0x2, 0x3, 0x4, 0x5, 0x6
ATE_UNSIGNED, ATE_UNSIGNED_CHAR, ATE_UTF = 0x7, 0x8, 0x10

CACHE_VERSION = 2


@dataclass(frozen=True)
class Type:
    """A parameter's or return value's type, as much as decoding it needs."""

    kind: str  # int, char, bool, float, enum, pointer, string, struct, void, unknown
    name: str
    size: int = 8
    signed: bool = False
    enumerators: tuple[tuple[int, str], ...] = ()
    has_float: bool = False  # a struct with a float member (passed in vector registers)


VOID = Type("void", "void", 0)
UNKNOWN = Type("unknown", "?", 8)


@dataclass(frozen=True)
class Param:
    name: str
    type: Type
    artificial: bool = False  # C++'s `this`
    constant: int | None = None  # a clone's parameter fixed to this value: not passed


@dataclass(frozen=True)
class Function:
    name: str
    params: tuple[Param, ...]
    returns: Type
    variadic: bool = False


class UnknownFormat(Exception):
    """A module file that is neither ELF nor 64-bit Mach-O (PE on Windows, 32-bit Mach-O)."""

    def __init__(self, path: Path) -> None:
        super().__init__(f"{path}: neither ELF nor 64-bit Mach-O: its debug information is "
                         "not read")


@dataclass
class _Found:
    """What the cache keeps of one module build: answers by file address."""

    functions: dict[int, Function | None] = field(default_factory=dict)
    places: dict[int, tuple[str, int] | None] = field(default_factory=dict)


class ModuleDebug:
    """One module file's debug information, read lazily and cached."""

    def __init__(self, path: Path, debug_path: Path | None = None) -> None:
        """`debug_path`: where the DWARF of the module at `path` is when not in it, at the
        same addresses: a split debug file (ELF, objcopy --only-keep-debug) or a dSYM's
        DWARF file (Mach-O)."""
        self.path = path
        with open(path, "rb") as f:
            head = f.read(4)
        if head == b"\x7fELF":
            self._open_elf(path, debug_path)
        elif is_macho(head):
            self._open_macho(path, debug_path)
        else:
            raise UnknownFormat(path)
        self._dwarf: Any = None
        self._symbols: tuple[list[int], list[tuple[int, str]]] | None = None
        self._cus: dict[int, dict[int, Any]] = {}  # CU offset -> low_pc -> subprogram DIE
        self._lines: dict[int, tuple[list[int], list[tuple[str, int] | None]]] = {}
        stat = path.stat()
        key = f"{path.resolve()}|{stat.st_size}|{self.build_id or stat.st_mtime_ns}|{debug_path}"
        self._cache_path = _cache_dir() / (hashlib.sha1(key.encode()).hexdigest() + ".pickle")
        self._found = self._load_cache()
        self._dirty = False

    def _open_elf(self, path: Path, debug_path: Path | None) -> None:
        from elftools.elf.elffile import ELFFile

        self.format = "elf"
        self._files = [open(path, "rb")]
        elf = ELFFile(self._files[0])
        loads = [s["p_vaddr"] for s in elf.iter_segments() if s["p_type"] == "PT_LOAD"]
        self.load_base = min(loads) if loads else 0
        self.build_id = _build_id(elf)
        dwarf_elf = elf
        if debug_path is not None:
            self._files.append(open(debug_path, "rb"))
            dwarf_elf = ELFFile(self._files[1])
        self.has_dwarf = dwarf_elf.has_dwarf_info() and \
            dwarf_elf.get_section_by_name(".debug_info") is not None
        self._read_dwarf = dwarf_elf.get_dwarf_info
        self._read_symbols = lambda: _elf_symbols(elf)

    def _open_macho(self, path: Path, debug_path: Path | None) -> None:
        self.format = "macho"
        self._files = []
        image = MachO.read(path)
        self.load_base = image.text_address  # a module's base is its __TEXT segment's start
        self.build_id = image.uuid
        dwarf_image = MachO.read(debug_path, image.cputype) if debug_path else image
        self.has_dwarf = dwarf_image.has_dwarf()
        self._read_dwarf = dwarf_image.dwarf
        self._read_symbols = lambda: [(a, 0, n) for a, n in image.symbols]

    # --- answers -----------------------------------------------------------------

    def function(self, file_address: int) -> Function | None:
        """The function whose entry is at this file address (None: no debug info on it)."""
        if file_address not in self._found.functions:
            self._found.functions[file_address] = self._read_function(file_address)
            self._dirty = True
        return self._found.functions[file_address]

    def where(self, file_address: int) -> tuple[str | None, tuple[str, int] | None]:
        """(`function+0xOFF` from the symbol table, (file, line) from the line table)."""
        return self._symbolise(file_address), self.line(file_address)

    def line(self, file_address: int) -> tuple[str, int] | None:
        if file_address not in self._found.places:
            self._found.places[file_address] = self._read_line(file_address)
            self._dirty = True
        return self._found.places[file_address]

    def save(self) -> None:
        """Write what was found to the cache (nothing to do when nothing new was read)."""
        if not self._dirty:
            return
        try:
            self._cache_path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self._cache_path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_bytes(pickle.dumps((CACHE_VERSION, self._found)))
            tmp.replace(self._cache_path)
            self._dirty = False
        except OSError:
            pass  # a cache that cannot be written only costs time

    def close(self) -> None:
        self.save()
        for f in self._files:
            f.close()

    def split_debug_names(self) -> list[Path]:
        """Where this module's separate DWARF may be, relative to a directory: for ELF,
        .build-id/xx/yyyy.debug and NAME.debug; for Mach-O, NAME.dSYM's DWARF file."""
        name = self.path.name
        if self.format == "macho":
            return [Path(f"{name}.dSYM") / "Contents" / "Resources" / "DWARF" / name]
        out = [Path(name + ".debug")]
        if self.build_id:
            out.insert(0, Path(".build-id") / self.build_id[:2] / (self.build_id[2:] + ".debug"))
        return out

    # --- DWARF ---------------------------------------------------------------------

    def _load_cache(self) -> _Found:
        try:
            version, found = pickle.loads(self._cache_path.read_bytes())
            if version == CACHE_VERSION and isinstance(found, _Found):
                return found
        except (OSError, pickle.PickleError, ValueError, EOFError, AttributeError, TypeError):
            pass
        return _Found()

    def _dwarf_info(self) -> Any:
        if self._dwarf is None and self.has_dwarf:
            self._dwarf = self._read_dwarf()
        return self._dwarf

    def _cu_for(self, address: int) -> Any:
        dwarf = self._dwarf_info()
        if dwarf is None:
            return None
        try:
            aranges = dwarf.get_aranges()
            offset = aranges.cu_offset_at_addr(address) if aranges else None
            if offset is not None:
                return dwarf.get_CU_at(offset)
        except Exception:  # noqa: BLE001 (damaged aranges: fall back to the ranges below)
            pass
        for cu in dwarf.iter_CUs():
            top = cu.get_top_DIE()
            for low, high in _ranges(dwarf, top):
                if low <= address < high:
                    return cu
        return None

    def _subprograms(self, cu: Any) -> dict[int, Any]:
        """low_pc -> DIE of every subprogram with code in this compile unit."""
        if cu.cu_offset not in self._cus:
            found = {}
            for die in cu.iter_DIEs():
                if die.tag == "DW_TAG_subprogram":
                    for low, _ in _ranges(self._dwarf, die)[:1]:
                        found[low] = die
            self._cus[cu.cu_offset] = found
        return self._cus[cu.cu_offset]

    def _read_function(self, address: int) -> Function | None:
        cu = self._cu_for(address)
        if cu is None:
            return None
        die = self._subprograms(cu).get(address)
        if die is None:
            return None
        origin = _origin(die)
        name = _name(die) or _name(origin) or f"0x{address:x}"
        params, variadic = [], False
        children = [c for c in die.iter_children()
                    if c.tag in ("DW_TAG_formal_parameter", "DW_TAG_unspecified_parameters")]
        if not any(c.tag == "DW_TAG_formal_parameter" for c in children) and origin is not die:
            children = [c for c in origin.iter_children()
                        if c.tag in ("DW_TAG_formal_parameter", "DW_TAG_unspecified_parameters")]
        for i, child in enumerate(children):
            if child.tag == "DW_TAG_unspecified_parameters":
                variadic = True
                continue
            source = _origin(child)
            pname = _name(child) or _name(source) or f"arg{i + 1}"
            artificial = bool(_attr(child, "DW_AT_artificial") or _attr(source, "DW_AT_artificial"))
            ptype = _type(_typed(child) or _typed(source))
            constant = _attr(child, "DW_AT_const_value")
            params.append(Param(pname, ptype, artificial,
                                constant if isinstance(constant, int) else None))
        return Function(name, tuple(params), _type(_typed(die) or _typed(origin)), variadic)

    def _read_line(self, address: int) -> tuple[str, int] | None:
        cu = self._cu_for(address)
        if cu is None:
            return None
        starts, rows = self._line_table(cu)
        i = bisect.bisect_right(starts, address) - 1
        return rows[i] if i >= 0 else None

    def _line_table(self, cu: Any) -> tuple[list[int], list[tuple[str, int] | None]]:
        """The compile unit's line table as sorted row addresses and their (file, line),
        read once per unit (an end of sequence maps to None)."""
        if cu.cu_offset in self._lines:
            return self._lines[cu.cu_offset]
        program = self._dwarf.line_program_for_CU(cu)
        table: list[tuple[int, tuple[str, int] | None]] = []
        if program is not None:
            files = program["file_entry"]
            first = 1 if program["version"] < 5 else 0
            for entry in program.get_entries():
                state = entry.state
                if state is None:
                    continue
                place = None
                index = state.file - first
                if not state.end_sequence and 0 <= index < len(files):
                    place = (_text(files[index].name), int(state.line))
                table.append((state.address, place))
        table.sort(key=lambda row: (row[0], row[1] is not None))  # a start beats an end
        self._lines[cu.cu_offset] = ([a for a, _ in table], [p for _, p in table])
        return self._lines[cu.cu_offset]

    # --- the symbol table ------------------------------------------------------------

    def _symbolise(self, address: int) -> str | None:
        if self._symbols is None:
            entries = sorted(self._read_symbols())
            self._symbols = ([e[0] for e in entries], [(e[1], e[2]) for e in entries])
        starts, rest = self._symbols
        i = bisect.bisect_right(starts, address) - 1
        if i < 0:
            return None
        size, name = rest[i]
        offset = address - starts[i]
        if size and offset >= size:
            return None
        return f"{demangle(name)}+0x{offset:x}"


def _elf_symbols(elf: Any) -> list[tuple[int, int, str]]:
    """(address, size, name) of the ELF file's functions: .symtab, else .dynsym."""
    for name in (".symtab", ".dynsym"):
        section = elf.get_section_by_name(name)
        if section is None or not hasattr(section, "iter_symbols"):
            continue
        entries = [(int(s["st_value"]), int(s["st_size"]), s.name)
                   for s in section.iter_symbols()
                   if s["st_info"]["type"] == "STT_FUNC" and s["st_value"] and s.name]
        if entries:
            return entries
    return []


# --- DWARF helpers -----------------------------------------------------------------

def _attr(die: Any, name: str) -> Any:
    if die is None:
        return None
    a = die.attributes.get(name)
    return None if a is None else a.value


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _name(die: Any) -> str | None:
    value = _attr(die, "DW_AT_name")
    return None if value is None else _text(value)


def _origin(die: Any) -> Any:
    """The DIE that names this one: its abstract origin or specification, followed."""
    seen = 0
    while die is not None and seen < 8:
        for attr in ("DW_AT_abstract_origin", "DW_AT_specification"):
            if attr in die.attributes:
                die = die.get_DIE_from_attribute(attr)
                break
        else:
            return die
        seen += 1
    return die


def _typed(die: Any) -> Any:
    if die is None or "DW_AT_type" not in die.attributes:
        return None
    return die.get_DIE_from_attribute("DW_AT_type")


def _ranges(dwarf: Any, die: Any) -> list[tuple[int, int]]:
    low = _attr(die, "DW_AT_low_pc")
    if low is not None:
        high_attr = die.attributes.get("DW_AT_high_pc")
        if high_attr is None:
            return [(low, low + 1)]
        high = high_attr.value
        if high_attr.form != "DW_FORM_addr":
            high = low + high  # DWARF 4+: an offset from low_pc
        return [(low, high)]
    if "DW_AT_ranges" in die.attributes:
        try:
            lists = dwarf.range_lists()
            if lists is None:
                return []
            base = _attr(die.cu.get_top_DIE(), "DW_AT_low_pc") or 0
            out = []
            for r in lists.get_range_list_at_offset(die.attributes["DW_AT_ranges"].value,
                                                    cu=die.cu):
                if hasattr(r, "begin_offset"):
                    begin, end = r.begin_offset, r.end_offset
                    if not getattr(r, "is_absolute", False):
                        begin, end = begin + base, end + base
                    out.append((begin, end))
            return out
        except Exception:  # noqa: BLE001 (forms pyelftools cannot read: no range)
            return []
    return []


def _type(die: Any, depth: int = 0) -> Type:
    """A Type from a type DIE: typedefs and qualifiers followed (a typedef keeps its name)."""
    if die is None:
        return VOID
    if depth > 16:
        return UNKNOWN
    tag = die.tag
    if tag in ("DW_TAG_const_type", "DW_TAG_volatile_type", "DW_TAG_restrict_type",
               "DW_TAG_atomic_type", "DW_TAG_typedef"):
        inner = _type(_typed(die), depth + 1)
        if tag == "DW_TAG_typedef" and inner.kind not in ("struct", "void"):
            name = _name(die) or inner.name
            if inner.kind == "char" and "int" in name:  # int8_t, uint8_t: numbers
                return replace(inner, kind="int", name=name)
            return replace(inner, name=name)
        if tag == "DW_TAG_const_type":
            return replace(inner, name=f"const {inner.name}")
        return inner
    size = _attr(die, "DW_AT_byte_size")
    name = _name(die) or "?"
    if tag == "DW_TAG_base_type":
        enc = _attr(die, "DW_AT_encoding")
        size = size or 8
        if enc == ATE_BOOLEAN:
            return Type("bool", name, size)
        if enc in (ATE_FLOAT, ATE_COMPLEX):
            return Type("float", name, size)
        if enc in (ATE_SIGNED_CHAR, ATE_UNSIGNED_CHAR) and size == 1:
            return Type("char", name, 1, signed=enc == ATE_SIGNED_CHAR)
        return Type("int", name, size, signed=enc in (ATE_SIGNED, ATE_SIGNED_CHAR))
    if tag == "DW_TAG_enumeration_type":
        values = []
        for child in die.iter_children():
            if child.tag == "DW_TAG_enumerator":
                values.append((int(_attr(child, "DW_AT_const_value")), _name(child) or "?"))
        under = _type(_typed(die), depth + 1) if _typed(die) is not None else None
        signed = under.signed if under is not None else any(v < 0 for v, _ in values)
        return Type("enum", f"enum {name}", size or 4, signed=signed,
                    enumerators=tuple(values))
    if tag in ("DW_TAG_pointer_type", "DW_TAG_reference_type",
               "DW_TAG_rvalue_reference_type", "DW_TAG_ptr_to_member_type",
               "DW_TAG_array_type"):
        target = _typed(die)
        pointee = _strip(target)
        if pointee is not None and pointee.tag == "DW_TAG_base_type" and \
                _attr(pointee, "DW_AT_encoding") in (ATE_SIGNED_CHAR, ATE_UNSIGNED_CHAR) and \
                _attr(pointee, "DW_AT_byte_size") == 1:
            return Type("string", "char *", size or die.cu["address_size"])
        shown = _name(pointee) if pointee is not None else "void"
        return Type("pointer", f"{shown or '?'} *", size or die.cu["address_size"])
    if tag in ("DW_TAG_structure_type", "DW_TAG_class_type", "DW_TAG_union_type"):
        floats = any(_is_float(_typed(m)) for m in die.iter_children()
                     if m.tag == "DW_TAG_member")
        return Type("struct", name, size or 0, has_float=floats)
    return replace(UNKNOWN, name=name, size=size or 8)


def _strip(die: Any) -> Any:
    """A type DIE without its qualifiers and typedefs."""
    for _ in range(16):
        if die is None or die.tag not in ("DW_TAG_const_type", "DW_TAG_volatile_type",
                                          "DW_TAG_restrict_type", "DW_TAG_typedef",
                                          "DW_TAG_atomic_type"):
            return die
        die = _typed(die)
    return None


def _is_float(die: Any) -> bool:
    die = _strip(die)
    if die is None:
        return False
    if die.tag == "DW_TAG_base_type":
        return _attr(die, "DW_AT_encoding") in (ATE_FLOAT, ATE_COMPLEX)
    if die.tag == "DW_TAG_array_type":
        return _is_float(_typed(die))
    return False


def _build_id(elf: Any) -> str | None:
    for section in elf.iter_sections():
        if section["sh_type"] != "SHT_NOTE":
            continue
        for note in section.iter_notes():
            if note["n_type"] == "NT_GNU_BUILD_ID":
                return str(note["n_desc"])
    return None


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ada" / "debuginfo"
