"""Arguments, return values and callers by name, from the traced binaries' own DWARF: real
programs built with -g at -O0 and -O2 (where gcc clones scale() into scale.constprop.0) and
without -g, a C++ method, the cache, --symbols, the args view; and, on registers made up here,
the arm64 calling convention and Mach-O files built by clang (there is no arm64 machine or Mac
to trace on)."""

import platform
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import ada.atf as atf
from ada.atf import format as F
from ada.tracer.analysis.arguments import Decoder
from ada.tracer.symbols import debuginfo as D
from ada.tracer.symbols import names
from ada.tracer.symbols.conventions import Convention
from helpers import run_ada, session_path

TESTS = Path(__file__).parent

SOURCE = TESTS / "targets" / "args.c"
FUNCTIONS = ["ints", "wide", "shout", "pick", "measure", "norm", "make_big", "eight", "keep",
             "twice"]


def build(out: Path, name: str, *flags: str, source: Path = SOURCE) -> Path:
    exe = out / name
    compiler = "g++" if source.suffix == ".cpp" else "gcc"
    subprocess.run([compiler, *flags, "-o", str(exe), str(source)], check=True)
    return exe


def record(exe: Path, out: Path, *select: str) -> Path:
    done = run_ada("trace", "-q", "--detail", "-o", out, "-f", exe, *select)
    assert done.returncode == 0, done.stderr
    return session_path(done)


def select_args(exe: Path) -> list[str]:
    return [a for f in FUNCTIONS + ["scale*"] for a in ("-s", f"{exe.name}!{f}")]


def replay(session, *args):
    done = run_ada("replay", session, *args)
    assert done.returncode == 0, done.stderr
    return [line.split("| ", 1)[1] for line in done.stdout.splitlines()[1:]], done.stderr


def line_of(text: str) -> int:
    """The line of args.c's main that makes a call."""
    return next(i for i, line in enumerate(SOURCE.read_text().splitlines(), 1)
                if text in line)


@pytest.fixture(scope="module")
def sessions(tmp_path_factory):
    out = tmp_path_factory.mktemp("args")
    made = {}
    for name, flags in (("args_O0", ["-O0", "-g"]), ("args_O2", ["-O2", "-g"]),
                        ("args_nodebug", ["-O2"])):
        exe = build(out, name, *flags)
        made[name] = record(exe, out / f"trace_{name}", *select_args(exe))
    return made


@pytest.mark.parametrize("build_name", ["args_O0", "args_O2"])
def test_replay_names_and_decodes_every_kind_of_argument(sessions, build_name):
    lines, err = replay(sessions[build_name], "--callers")
    scale = "scale" if build_name == "args_O0" else "scale.constprop.0"
    want = [
        r"ints\(a=-5, b=200, c=-300, d=60000, e=-70000, f=4000000000\) = -70005;",
        r"wide\(a=-1234567890123, b=18000000000000000000\) = -1234567890123;",
        r"shout\(c='a', upper=true\) = 'A';",
        r"pick\(c=RED\) = BLUE;",
        r"pick\(c=BLUE\) = RED;",
        r'measure\(s="hello", p=(0x[0-9a-f]+)\) = 5;',  # the string, captured at the call
        r"norm\(pt=(0x[0-9a-f]+)\) = 25;",
        r"make_big\(seed=10\) = \{\.\.\.\} @0x[0-9a-f]+;",  # returned in memory: rdi held it
        r"eight\(a=1, b=2, c=3, d=4, e=5, f=6, g=7, h=8\) = 36;",  # g, h from the stack
        rf"{re.escape(scale)}\(value=11, factor=3\) = 33;",  # factor: the clone's constant
        rf"{re.escape(scale)}\(value=21, factor=3\) = 63;",
        r'keep\(label="long", s="0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-\+"'
        r'\.\.\.\) = 108;',  # 64 bytes kept, and ... : it went on
        r'keep\(label="null", s=0x0\) = 110;',
        r'keep\(label="bad", s=0x10\) = 98;',  # not readable: hex, and the program lives on
    ] + ([r"twice\(x=1\) = 2;"] if build_name == "args_O0" else []) + [
        r"twice\(x=5\) = 10;",  # at -O2 the one out-of-line copy (the other call is inlined)
    ]
    calls = ["ints(-5", "wide(-", "shout('a'", "pick(RED)", "pick(RED)", 'measure("hello"',
             "norm(&pt)", "make_big(10)", "eight(1", "scale(argc + 10", "scale(argc + 10",
             'keep("long"', 'keep("null"', 'keep("null"'] + \
        ["twice(argc)"] * (2 if build_name == "args_O0" else 1)
    assert len(lines) == len(want), lines
    for line, pattern, call in zip(lines, want, calls):
        text, _, source = line.partition("  /* from ")
        assert re.fullmatch(pattern, text), line
        assert re.fullmatch(rf"main\+0x[0-9a-f]+ \(args\.c:{line_of(call)}\) \*/", source), line
    # measure(..., &pt) and norm(&pt): the same pointer
    assert re.search(want[5], lines[5]).group(1) == re.search(want[6], lines[6]).group(1)
    assert "note" not in err
    # records carrying strings are longer by strings_size: verify knows it (docs/format.md)
    assert run_ada("verify", sessions[build_name]).returncode == 0


def test_without_debug_information_raw_registers_and_one_note(sessions):
    lines, err = replay(sessions["args_nodebug"])
    # the raw registers as the caller left them: uint8_t 200 is 0xc8 from gcc on x86_64 and
    # 0xffffffc8 (mov w1, #-56) on arm64; neither ABI defines the bits above the byte
    b = "0xffffffc8" if platform.machine() == "aarch64" else "0xc8"
    assert lines[0] == f"ints(0xfffffffb, {b}, 0xfffffed4) = 0xfffeee8b;"
    assert len(lines) == 15 and err.count("\n") == 1
    assert "args_nodebug: no debug information" in err


def test_dump_detail_shows_arguments_return_values_and_callers(sessions):
    text = run_ada("dump", sessions["args_O0"], "--detail").stdout
    assert "args: c=RED" in text and "returns BLUE" in text
    assert "called from main+0x" in text and f"(args.c:{line_of('eight(1')})" in text


def test_symbols_finds_a_binary_that_moved(sessions, tmp_path):
    exe = build(tmp_path, "moved", "-O0", "-g")
    session = record(exe, tmp_path / "trace", "-s", "moved!pick")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.move(exe, elsewhere / "moved")
    lines, err = replay(session)
    assert lines[0].startswith("pick(0x0, ") and lines[0].endswith(") = 0x7;")  # raw: RED, BLUE
    assert "moved: its file is not here" in err and "--symbols" in err
    lines, err = replay(session, "--symbols", elsewhere)
    assert lines[:2] == ["pick(c=RED) = BLUE;", "pick(c=BLUE) = RED;"] and not err
    bad = run_ada("replay", session, "--symbols", tmp_path / "nothing")
    assert bad.returncode == 1 and "not a directory" in bad.stderr


def test_symbols_finds_a_split_debug_file_by_build_id(tmp_path):
    """A stripped binary, its DWARF in a split debug file under .build-id/xx/yyyy.debug (as
    distributions and Android builds keep them): --symbols DIR finds it."""
    exe = build(tmp_path, "split", "-O0", "-g", "-Wl,--build-id")
    debug_dir = tmp_path / "debug"
    session = record(exe, tmp_path / "trace", "-s", "split!pick")
    build_id = re.search(r"Build ID: ([0-9a-f]+)", subprocess.run(
        ["readelf", "-n", str(exe)], capture_output=True, text=True).stdout).group(1)
    target = debug_dir / ".build-id" / build_id[:2] / f"{build_id[2:]}.debug"
    target.parent.mkdir(parents=True)
    subprocess.run(["objcopy", "--only-keep-debug", str(exe), str(target)], check=True)
    subprocess.run(["strip", "--strip-debug", str(exe)], check=True)
    lines, err = replay(session)
    assert lines[0].startswith("pick(0x0, ") and "split: no debug information" in err
    lines, err = replay(session, "--symbols", debug_dir)
    assert lines[:2] == ["pick(c=RED) = BLUE;", "pick(c=BLUE) = RED;"] and not err


def test_strings_of_a_library_loaded_later_are_captured_too(tmp_path):
    """greet(const char *who, long times) in a library dlopened after ada started: the host
    reads its DWARF when the module-loaded message comes and tells the agent, so calls from
    then on carry the string (the first ones may still show it in hex)."""
    lib = build(tmp_path, "libstrlib.so", "-O1", "-g", "-shared", "-fPIC",
                source=TESTS / "targets" / "strlib.c")
    exe = build(tmp_path, "late_strings", "-O1", "-g", source=TESTS / "targets" / "late_strings.c")
    # 20 ms between calls; 200 ms on the emulated arm64 machine, where the host side (Python,
    # pyelftools) runs about ten times slower (it took 0.8 s there to tell the agent)
    interval = "200" if platform.machine() == "aarch64" else "20"
    done = run_ada("trace", "-q", "--detail", "-o", tmp_path / "trace", "-f", exe, lib, "40",
                   interval, "-i", "libstrlib.so!greet")
    assert done.returncode == 0, done.stderr
    lines, _ = replay(session_path(done))
    assert len(lines) == 40
    shown = [re.fullmatch(r'greet\(who=(".*"|0x[0-9a-f]+), times=(\d+)\) = -?\d+;', line)
             for line in lines]
    assert all(shown) and [int(m.group(2)) for m in shown] == list(range(40))
    strings = [m.group(1) == '"world"' for m in shown]
    # in hex until the host has told the agent (here 2 calls, 40 ms), then always the string
    first = strings.index(True)
    assert all(strings[first:]) and first <= 20, lines


def test_debug_information_is_cached_per_module_build(sessions, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    session = atf.open_session(sessions["args_O2"])
    fids = {name: fid for fid, name in session.symbol_names().items()}
    decoder = Decoder(session)
    first = decoder.function(fids["pick"])
    decoder.save()
    assert first is not None and list((tmp_path / "ada" / "debuginfo").glob("*.pickle"))

    def no_dwarf(self, address):
        raise AssertionError("DWARF parsed again")
    monkeypatch.setattr(D.ModuleDebug, "_read_function", no_dwarf)
    again = Decoder(session).function(fids["pick"])
    assert again == first and [p.name for p in again.params] == ["c"]


def test_query_args_view(sessions):
    rows = run_ada("query", sessions["args_O2"], "SELECT position, arg, value FROM args "
                   "WHERE name = 'pick' ORDER BY seq, position", "--csv").stdout.splitlines()
    assert rows == ["position,arg,value", "1,c,RED", ",return,BLUE", "1,c,BLUE", ",return,RED"]


def test_cpp_names_are_demangled_and_this_is_shown(tmp_path):
    exe = build(tmp_path, "methods", "-O1", "-g", source=TESTS / "targets" / "methods.cpp")
    session = record(exe, tmp_path / "trace", "-s", "methods!_ZN6shapes*")
    lines, _ = replay(session)
    assert [re.sub(r"this=0x[0-9a-f]+", "this=P", line) for line in lines] == [
        "shapes::Counter::add(this=P, n=5, twice=false) = 105;",
        "shapes::Counter::add(this=P, n=7, twice=true) = 119;",
        "shapes::area(w=6, h=7) = 42;"]
    report = run_ada("report", session).stdout
    assert "shapes::Counter::add(long, bool)" in report and "_ZN6shapes" not in report
    folded = tmp_path / "m.folded"
    assert run_ada("export", session, "-f", "folded", "-o", folded).returncode == 0
    assert "shapes::area(int, int) " in folded.read_text()


def test_demangle_and_parameter_lists():
    assert names.demangle("_ZN6shapes4areaEii") == "shapes::area(int, int)"
    assert names.demangle("main") == "main" and names.demangle("_Znotmangled") == "_Znotmangled"
    assert names.without_parameters("std::vector<int>::push_back(int const&)") == \
        "std::vector<int>::push_back"
    assert names.without_parameters("Foo::operator()(int) const") == "Foo::operator()"


LONG = D.Type("int", "long", 8, signed=True)
INT = D.Type("int", "int", 4, signed=True)


def fn(*types, returns=LONG):
    return D.Function("f", tuple(D.Param(f"p{i}", t) for i, t in enumerate(types, 1)), returns)


def test_arm64_arguments_past_the_registers_come_from_the_stack():
    regs = tuple(range(1, 9))  # x0..x7
    stack = (9).to_bytes(8, "little") + (-10 & (1 << 64) - 1).to_bytes(8, "little")
    got = Convention(F.ARCH_ARM64).arguments(fn(*[LONG] * 10), regs, stack)
    assert [v for _, v in got] == [str(i) for i in range(1, 10)] + ["-10"]
    # Apple's arm64 packs stack arguments by their size: two ints in one 8-byte slot
    packed = (9).to_bytes(4, "little") + (10).to_bytes(4, "little")
    got = Convention(F.ARCH_ARM64, apple=True).arguments(fn(*[LONG] * 8, INT, INT), regs,
                                                          packed)
    assert [v for _, v in got][8:] == ["9", "10"]
    big = D.Type("struct", "big", 32)
    assert Convention(F.ARCH_ARM64).arguments(fn(big, LONG), (0x1000, 5), b"") == [
        ("p1", "{...} @0x1000"), ("p2", "5")]  # by reference, in x0
    assert Convention(F.ARCH_ARM64).result(fn(returns=INT), (0xFFFFFFFF, 0)) == "-1"


def test_x86_64_floats_struct_returns_and_stack_arguments():
    c = Convention(F.ARCH_X86_64)
    double = D.Type("float", "double", 8)
    # a double takes no integer register: the long after it is in rdi
    assert c.arguments(fn(double, LONG), (7, 0, 0, 0, 0, 0), b"") == [("p1", "?"), ("p2", "7")]
    big = D.Type("struct", "big", 32)
    # returned in memory: rdi holds where, the first argument is in rsi
    assert c.arguments(fn(LONG, returns=big), (0x5000, 3, 0, 0, 0, 0), b"") == [("p1", "3")]
    # the seventh integer argument: on the stack just past the return address
    stack = (0x401000).to_bytes(8, "little") + (77).to_bytes(8, "little")
    assert c.arguments(fn(*[LONG] * 7), tuple(range(6)), stack)[-1] == ("p7", "77")
    assert c.arguments(fn(*[LONG] * 7), tuple(range(6)), stack[:8])[-1] == ("p7", "?")


MACHO = Path(__file__).parent / "data" / "macho"  # made by its make.sh (clang, no Mac here)


@pytest.mark.parametrize("name,arch,regs", [
    ("m_arm64.o", F.ARCH_ARM64, (0, 0x1000) + (0,) * 6),  # x0, x1
    ("m_x86_64.o", F.ARCH_X86_64, (0, 0x1000) + (0,) * 6)])  # rdi, rsi
def test_macho_debug_information_is_read_too(name, arch, regs, tmp_path, monkeypatch):
    """Mach-O (macOS, iOS): the same functions, types, symbols and lines as from ELF."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    debug = D.ModuleDebug(MACHO / name)
    assert debug.format == "macho" and debug.has_dwarf
    symbols = {n: a for a, _, n in debug._read_symbols()}
    assert set(symbols) == {"add", "pick", "main"}  # functions only: no data, no ltmp labels
    pick = debug.function(symbols["pick"])
    assert [(p.name, p.type.kind) for p in pick.params] == [("c", "enum"), ("why", "string")]
    c = Convention(arch)
    assert c.arguments(pick, regs, b"") == [("c", "RED"), ("why", "0x1000")]
    assert c.arguments(pick, regs, b"", {1: (b"because", False)})[1] == ("why", '"because"')
    assert c.result(pick, (7,) * 8) == "BLUE"
    line = next(i for i, text in enumerate((MACHO / "m.c").read_text().splitlines(), 1)
                if text.startswith("enum color pick"))
    assert debug.where(symbols["pick"] + 4) == ("pick+0x4", ("m.c", line))


def test_macho_dwarf_in_a_dsym_beside_the_binary(tmp_path, monkeypatch):
    from ada.tracer.symbols.modules import open_module
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert not D.ModuleDebug(MACHO / "m_nodebug.o").has_dwarf
    debug = open_module(MACHO / "m_nodebug.o")
    assert debug.has_dwarf and debug.function(0).name == "add"
