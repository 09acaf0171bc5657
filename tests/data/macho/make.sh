#!/bin/sh
# Mach-O files for tests/test_debuginfo.py (there is no Mac here): object files of m.c built
# by clang for arm64 and x86_64 macOS with DWARF, one without its DWARF, and that DWARF beside
# it as a dSYM would hold it (an object's DWARF is at the object's own addresses, as a dSYM's
# is at its binary's). Needs clang and llvm-objcopy (Debian: apt-get install clang).
set -e
cd "$(dirname "$0")"
clang -target arm64-apple-macos11 -g -O1 -c m.c -o m_arm64.o
clang -target x86_64-apple-macos11 -g -O1 -c m.c -o m_x86_64.o
llvm-objcopy --strip-debug m_x86_64.o m_nodebug.o
mkdir -p m_nodebug.o.dSYM/Contents/Resources/DWARF
cp m_x86_64.o m_nodebug.o.dSYM/Contents/Resources/DWARF/m_nodebug.o
