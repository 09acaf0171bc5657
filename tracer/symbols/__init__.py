"""What a traced program's own files say: debug information (DWARF in ELF and Mach-O), the
calling conventions that place arguments in registers and on the stack, C++ names.

The layer recording and reading both stand on: record asks it which parameters are C strings
(to capture them as it hooks), analysis asks it to name and decode arguments, callers and
functions. It imports neither of them, only ada.atf's constants.

    debuginfo.py    ModuleDebug: a module's functions, types and lines (pyelftools; cached)
    macho.py        Mach-O containers, for debuginfo (DWARF sections, symbols, UUID)
    conventions.py  Convention: where arguments and results are; values as C shows them
    modules.py      a module's file here (--symbols copies first), split debug files,
                    string_slots for the recorder
    names.py        demangle, without_parameters (C++), no debug information needed
"""
