"""The house's rules, checked from the code itself: one import name, layers, no circles, and
reading that works where Frida cannot load."""

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data"
PACKAGES = ("atf", "tracer", "agent")  # installed as ada.atf, ada.tracer, ada.agent
FRIDA = ("frida", "frida_tools", "_frida")

# Lower layers never import higher ones; equal layers other than their own folder neither.
LAYERS = [("ada.atf", 0), ("ada.tracer.errors", 1), ("ada.tracer.symbols", 2),
          ("ada.tracer.record", 3), ("ada.tracer.analysis", 3), ("ada.tracer.cli", 4),
          ("ada.tracer", 1), ("ada.agent", 0), ("ada", 5)]


def layer_of(module: str) -> tuple[str, int]:
    for prefix, level in LAYERS:
        if module == prefix or module.startswith(prefix + "."):
            return prefix, level
    raise AssertionError(f"{module} is in no layer")


def package_modules() -> dict[str, Path]:
    found = {"ada": ROOT / "__init__.py", "ada.__main__": ROOT / "__main__.py"}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(("ada",) + parts).removesuffix(".__init__")
            found[name] = path
    return found


def imports(module: str, path: Path) -> list[tuple[str, bool]]:
    """(imported module, at module level?) for every import of the file, relative ones resolved."""
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    top_level = {id(node) for node in tree.body}
    for node in tree.body:  # `if TYPE_CHECKING:` blocks are not imports at run time
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            top_level.discard(id(node))
            for child in ast.walk(node):
                child.type_checking = True  # type: ignore[attr-defined]
    out = []
    for node in ast.walk(tree):
        if getattr(node, "type_checking", False):
            continue
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                prefix = ".".join(base + ([node.module] if node.module else []))
                names = [prefix] if node.module else [f"{prefix}.{a.name}" for a in node.names]
            else:
                names = [node.module]
        else:
            continue
        out.extend((name, id(node) in top_level) for name in names)
    return out


MODULES = package_modules()
IMPORTS = {m: imports(m, p) for m, p in MODULES.items()}


def test_project_code_is_imported_by_its_installed_name_only():
    for module, found in IMPORTS.items():
        stray = [name for name, _ in found if name.split(".")[0] in PACKAGES]
        assert not stray, f"{module} imports {stray}: use ada.atf, ada.tracer, ada.agent"


def test_no_import_runs_back_up_a_layer():
    for module, found in IMPORTS.items():
        mine, level = layer_of(module)
        for name, _ in found:
            if not name.startswith("ada"):
                continue
            theirs, their_level = layer_of(name)
            assert their_level < level or theirs == mine, f"{module} -> {name} runs back up"


def project_imports(module: str) -> set[str]:
    return {name for name, _ in IMPORTS[module] if name.startswith("ada")}


def test_each_layer_imports_only_what_it_stands_on():
    """The rules by name (the levels above imply them; a change to the levels must not lose
    them): atf imports nothing of the tracer; record and analysis do not import each other or
    the CLI; the symbols layer imports neither of them."""
    def under(name: str, *prefixes: str) -> bool:
        return any(name == p or name.startswith(p + ".") for p in prefixes)
    checked = set()
    for module in IMPORTS:
        found = project_imports(module)
        if under(module, "ada.atf"):
            assert not [n for n in found if not under(n, "ada.atf")], module
        elif under(module, "ada.tracer.record"):
            assert not [n for n in found if under(n, "ada.tracer.analysis", "ada.tracer.cli")], \
                module
        elif under(module, "ada.tracer.analysis"):
            assert not [n for n in found if under(n, "ada.tracer.record", "ada.tracer.cli")], \
                module
        elif under(module, "ada.tracer.symbols"):
            assert not [n for n in found if under(n, "ada.tracer.record", "ada.tracer.analysis",
                                                  "ada.tracer.cli")], module
        else:
            continue
        checked.add(module.split(".")[1] if module.count(".") == 1 else module.split(".")[2])
    assert {"manifest", "record", "analysis", "symbols"} <= checked  # the rules ran on each


def test_atf_and_analysis_never_import_frida_or_recording():
    for module, found in IMPORTS.items():
        names = [name for name, _ in found]
        if layer_of(module)[0] in ("ada.atf", "ada.tracer.analysis", "ada.tracer.symbols"):
            assert not [n for n in names if n.split(".")[0] in FRIDA], module
            assert not [n for n in names if n.startswith("ada.tracer.record")], module


def test_the_cli_reaches_recording_only_inside_trace_when_it_runs():
    for module, found in IMPORTS.items():
        if not module.startswith("ada.tracer.cli"):
            continue
        for name, at_top in found:
            if name.startswith("ada.tracer.record") or name.split(".")[0] in FRIDA:
                assert module == "ada.tracer.cli.trace" and not at_top, f"{module} -> {name}"


def test_no_import_circles():
    graph = {m: {n for n, top in found if top and n in MODULES and n != m}
             for m, found in IMPORTS.items()}
    state: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for n in graph[m]:
            if state.get(n) == 1:
                raise AssertionError("import circle: " + " -> ".join(path[path.index(n):] + [n]))
            if n not in state:
                visit(n, path + [n])
        state[m] = 2

    for m in graph:
        if m not in state:
            visit(m, [m])


WITHOUT_FRIDA = f"import sys; sys.modules.update(dict.fromkeys({list(FRIDA)!r}))"


def python_without_frida(code, *args):
    """Python where importing frida fails, as on a machine without it (cwd: not the repo)."""
    return subprocess.run([sys.executable, "-c", f"{WITHOUT_FRIDA}; {code}", *map(str, args)],
                          capture_output=True, text=True, timeout=60, cwd="/")


def ada_without_frida(*args):
    return python_without_frida("import runpy; sys.argv[0] = 'ada'; "
                                "runpy.run_module('ada', run_name='__main__')", *args)


def test_frida_is_really_unimportable_there():
    out = python_without_frida("import frida")
    assert out.returncode == 1 and "import of frida halted" in out.stderr


@pytest.mark.parametrize("args", [("info", DATA / "r1_session"),
                                  ("info", "--json", DATA / "r1_session"),
                                  ("dump", DATA / "r1_session", "--detail"),
                                  ("verify", DATA / "r1_session"), ("--help",),
                                  ("report", DATA / "r1_session"),
                                  ("replay", DATA / "r1_session"),
                                  ("graph", DATA / "r1_session")])
def test_reading_commands_work_without_frida(args):
    out = ada_without_frida(*args)
    assert out.returncode == 0, out.stderr
    with_frida = subprocess.run([sys.executable, "-m", "ada", *map(str, args)],
                                capture_output=True, text=True, timeout=60, cwd="/")
    assert out.stdout == with_frida.stdout


def test_trace_without_frida_says_so_in_one_line():
    out = ada_without_frida("trace", "-f", "/bin/true", "-i", "main")
    assert out.returncode == 1 and out.stderr.count("\n") == 1, out.stderr
    assert "ada trace needs Frida" in out.stderr and "Traceback" not in out.stderr
    info = json.loads(ada_without_frida("info", "--json", DATA / "r1_session").stdout)
    assert info["index_events"] == 10


def modules_loaded_by(*args):
    """The ada.tracer modules (and a few heavy standard ones) `ada ARGS` has imported when it
    ends, from the process itself."""
    code = ("import runpy, sys; sys.argv = ['ada', *sys.argv[1:]]\n"
            "try:\n    runpy.run_module('ada', run_name='__main__')\n"
            "except SystemExit:\n    pass\n"
            "print(' '.join(sorted(m for m in sys.modules if m.startswith('ada.tracer.') "
            "or m in ('http.server', 'frida'))))")
    out = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True,
                         text=True, timeout=60, cwd="/")
    assert out.returncode == 0, out.stderr
    return set(out.stdout.splitlines()[-1].split())  # the last line: after any help text


def test_a_subcommand_imports_its_own_module_and_no_other():
    """`ada trace` starts without the reading side (the analysis, the viewer's web server),
    and a reading command without Frida or recording: each start costs what its own work
    needs (seconds each on an emulated arm64 machine, where the suite starts ada hundreds of
    times)."""
    tracing = modules_loaded_by("trace", "--help")
    assert "ada.tracer.cli.trace" in tracing and "frida" in tracing
    assert not {m for m in tracing if m.startswith("ada.tracer.analysis")}, tracing
    assert not {"http.server", "ada.tracer.cli.view", "ada.tracer.cli.report"} & tracing
    reading = modules_loaded_by("info", DATA / "r1_session")
    assert "ada.tracer.cli.info" in reading
    assert not {m for m in reading if m.startswith("ada.tracer.record")} | \
        ({"frida", "ada.tracer.cli.trace", "ada.tracer.cli.view"} & reading), reading
