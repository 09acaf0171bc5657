"""The parts of a Mach-O file (macOS, iOS) that debug information needs, read with `struct`:
segments, sections, function symbols and the UUID, of a 64-bit little-endian image (or the
slice of a universal file for the wanted arch). Its DWARF (the __DWARF segment of a dSYM, or of
an object file) is handed to pyelftools' DWARF reader as plain sections: pyelftools reads DWARF
from any container, but parses only ELF itself.

Layouts: <mach-o/loader.h> and <mach-o/nlist.h> (mach_header_64, segment_command_64,
section_64, symtab_command, nlist_64, uuid_command) and <mach-o/fat.h> (big-endian fat_arch).
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MH_MAGIC_64, FAT_MAGIC = 0xFEEDFACF, 0xCAFEBABE
LC_SEGMENT_64, LC_SYMTAB, LC_UUID = 0x19, 0x2, 0x1B
CPU_ARM64, CPU_X86_64 = 0x0100000C, 0x01000007
N_STAB, N_TYPE, N_SECT = 0xE0, 0x0E, 0x0E
S_ATTR_SOME_INSTRUCTIONS = 0x00000400

# section name in __DWARF (16 characters at most) -> pyelftools' argument
DWARF_SECTIONS = {
    "__debug_info": "debug_info_sec", "__debug_aranges": "debug_aranges_sec",
    "__debug_abbrev": "debug_abbrev_sec", "__debug_str": "debug_str_sec",
    "__debug_loc": "debug_loc_sec", "__debug_ranges": "debug_ranges_sec",
    "__debug_line": "debug_line_sec", "__debug_addr": "debug_addr_sec",
    "__debug_str_offs": "debug_str_offsets_sec", "__debug_line_str": "debug_line_str_sec",
    "__debug_loclists": "debug_loclists_sec", "__debug_rnglists": "debug_rnglists_sec",
}


def is_macho(head: bytes) -> bool:
    """A 64-bit little-endian Mach-O image, or a universal (fat) file."""
    if len(head) < 4:
        return False
    return struct.unpack("<I", head[:4])[0] == MH_MAGIC_64 or \
        struct.unpack(">I", head[:4])[0] == FAT_MAGIC


@dataclass
class MachO:
    """One Mach-O image: `sections[(segment, section)] = (address, bytes)`, function
    `symbols` as (address, name), the `uuid`, and the __TEXT segment's address."""

    path: Path
    cputype: int = 0
    text_address: int = 0
    uuid: str | None = None
    sections: dict[tuple[str, str], tuple[int, bytes]] = field(default_factory=dict)
    symbols: list[tuple[int, str]] = field(default_factory=list)
    _code: list[bool] = field(default_factory=list)  # per section: holds instructions

    @classmethod
    def read(cls, path: Path, cputype: int | None = None) -> "MachO":
        data = path.read_bytes()
        start = 0
        if struct.unpack(">I", data[:4])[0] == FAT_MAGIC:
            count = struct.unpack(">I", data[4:8])[0]
            slices = [struct.unpack(">iiIII", data[8 + 20 * i:28 + 20 * i])
                      for i in range(count)]
            chosen = next((s for s in slices if cputype is None or s[0] == cputype), None)
            if chosen is None:
                raise ValueError(f"{path}: no slice for this arch in the universal file")
            start = chosen[2]
        magic, cpu, _, _, ncmds, _, _, _ = struct.unpack("<IiiIIIII", data[start:start + 32])
        if magic != MH_MAGIC_64:
            raise ValueError(f"{path}: not a 64-bit little-endian Mach-O file")
        image = cls(path, cpu)
        at = start + 32
        for _ in range(ncmds):
            cmd, size = struct.unpack("<II", data[at:at + 8])
            if cmd == LC_SEGMENT_64:
                image._segment(data, start, at)
            elif cmd == LC_SYMTAB:
                image._symtab(data, start, at)
            elif cmd == LC_UUID:
                image.uuid = data[at + 8:at + 24].hex()
            at += size
        image.symbols.sort()
        return image

    def _segment(self, data: bytes, start: int, at: int) -> None:
        name = data[at + 8:at + 24].rstrip(b"\0").decode()
        vmaddr = struct.unpack("<Q", data[at + 24:at + 32])[0]
        nsects = struct.unpack("<I", data[at + 64:at + 68])[0]
        if name == "__TEXT":
            self.text_address = vmaddr
        for i in range(nsects):
            s = at + 72 + 80 * i
            sect = data[s:s + 16].rstrip(b"\0").decode()
            seg = data[s + 16:s + 32].rstrip(b"\0").decode()
            addr, size, offset = struct.unpack("<QQI", data[s + 32:s + 52])
            flags = struct.unpack("<I", data[s + 64:s + 68])[0]
            self._code.append(bool(flags & S_ATTR_SOME_INSTRUCTIONS))  # n_sect counts from 1
            if seg == "__DWARF" or sect.startswith("__debug_"):
                self.sections[("__DWARF", sect)] = (addr, data[start + offset:start + offset
                                                                + size])

    def _symtab(self, data: bytes, start: int, at: int) -> None:
        symoff, nsyms, stroff, strsize = struct.unpack("<IIII", data[at + 8:at + 24])
        strings = data[start + stroff:start + stroff + strsize]
        for i in range(nsyms):
            n = start + symoff + 16 * i
            strx, ntype, nsect, _, value = struct.unpack("<IBBHQ", data[n:n + 16])
            if ntype & N_STAB or ntype & N_TYPE != N_SECT or not 0 < nsect <= len(self._code):
                continue
            end = strings.find(b"\0", strx)
            name = strings[strx:end].decode("utf-8", "replace")
            # functions only: in a section of code, and C-level (a leading underscore; the
            # others are the assembler's own labels, ltmp0...)
            if self._code[nsect - 1] and name.startswith("_"):
                self.symbols.append((value, name[1:]))

    def has_dwarf(self) -> bool:
        return ("__DWARF", "__debug_info") in self.sections

    def dwarf(self) -> Any:
        """pyelftools' DWARFInfo over this image's __DWARF sections."""
        from elftools.dwarf.dwarfinfo import DebugSectionDescriptor, DWARFInfo, DwarfConfig

        arguments: dict[str, Any] = {name: None for name in (
            "debug_frame_sec", "eh_frame_sec", "debug_pubtypes_sec", "debug_pubnames_sec",
            "debug_sup_sec", "gnu_debugaltlink_sec", "debug_types_sec",
            *DWARF_SECTIONS.values())}
        for (_, sect), (addr, data) in self.sections.items():
            if sect in DWARF_SECTIONS:
                arguments[DWARF_SECTIONS[sect]] = DebugSectionDescriptor(
                    io.BytesIO(data), sect.replace("__", ".", 1), 0, len(data), addr)
        arch = "AArch64" if self.cputype == CPU_ARM64 else "x64"
        return DWARFInfo(config=DwarfConfig(little_endian=True, machine_arch=arch,
                                            default_address_size=8), **arguments)
