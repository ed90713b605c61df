"""The layering rules of docs/style.md, checked by walking the folders (no hand-kept module list).

- ``textproc/core/`` imports only the standard library, ``regex``, ``jinja2``,
  ``textproc.errors``, ``textproc.options`` (the request's option values) and other core
  modules; never reads ``os.environ``.
- ``textproc/protocol/`` (every part) and the core never import each other.
- ``textproc`` never imports ``engine_stub``, ``tests``, ``bench`` or ``scripts``; only
  ``textproc/testing/`` imports ``textproc.testing``.
- ``bench/`` never imports ``tests`` and never edits ``sys.path``.
- Importing every core module (and ``textproc`` itself) loads no zmq, msgspec, asyncio or
  multiprocessing.
- ``textproc/service/`` never imports ``textproc.http`` (the frontends are command lines to it).
- ``textproc/http/`` has one folder per API with the same file names; ``server.py`` reaches an
  API only through its ``routes``.
- What an engine imports of the constraints (the mask lookup) loads no compiler, ``regex`` or
  parser; importing the parsers scans no format family (registries load on first use).
- No import cycle among textproc's modules, counting imports inside functions and under
  ``if TYPE_CHECKING:`` (a type two modules need lives below both); an import inside a
  function says why (start-up time) in a comment.
"""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "textproc"
CORE = PACKAGE / "core"
FORBIDDEN = ("zmq", "msgspec", "asyncio", "multiprocessing")
CORE_ALLOWED_THIRD_PARTY = {"regex", "jinja2"}
CORE_ALLOWED_TEXTPROC = ("textproc.errors", "textproc.options", "textproc.core")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}:{node.lineno}: relative import"
            found.append((node.lineno, node.module or ""))
    return found


CORE_FILES = sorted(CORE.rglob("*.py"))
ALL_FILES = sorted(PACKAGE.rglob("*.py"))


def test_the_walk_finds_the_core() -> None:
    names = {_module_name(p) for p in CORE_FILES}
    assert {"textproc.core.tokenizer", "textproc.core.chat.template", "textproc.core.parsing.output",
            "textproc.core.constraints.schema.to_regex", "textproc.core.tok.bpe"} <= names


@pytest.mark.parametrize("path", CORE_FILES, ids=_module_name)
def test_core_module_imports_only_core_and_allowed(path: Path) -> None:
    stdlib = sys.stdlib_module_names
    for lineno, name in _imports(path):
        top = name.split(".")[0]
        if top == "textproc":
            assert name.startswith(CORE_ALLOWED_TEXTPROC), f"{path.name}:{lineno} imports {name}"
        else:
            assert top not in FORBIDDEN, f"{path.name}:{lineno} imports {name}"
            assert top in stdlib or top in CORE_ALLOWED_THIRD_PARTY, f"{path.name}:{lineno} imports {name}"
    assert "os.environ" not in path.read_text(encoding="utf-8"), f"{path.name} reads the environment"


PROTOCOL_FILES = sorted((PACKAGE / "protocol").rglob("*.py"))


def test_protocol_and_core_never_import_each_other() -> None:
    assert {_module_name(p) for p in PROTOCOL_FILES} >= {"textproc.protocol",
                                                        "textproc.protocol.engine_frames"}
    for path in PROTOCOL_FILES:
        for lineno, name in _imports(path):
            assert not name.startswith("textproc.core"), f"{path.name}:{lineno} imports {name}"
    for path in CORE_FILES:
        for lineno, name in _imports(path):
            assert not (name == "textproc.protocol" or name.startswith("textproc.protocol.")), (
                f"{path.name}:{lineno} imports the protocol")


@pytest.mark.parametrize("path", ALL_FILES, ids=_module_name)
def test_textproc_never_imports_stub_tests_bench_or_scripts(path: Path) -> None:
    for lineno, name in _imports(path):
        assert name.split(".")[0] not in {"engine_stub", "tests", "bench", "scripts"}, (
            f"{path.name}:{lineno} imports {name}")


def test_only_the_testing_package_imports_textproc_testing() -> None:
    testing = PACKAGE / "testing"
    for path in ALL_FILES:
        if testing not in path.parents:
            for lineno, name in _imports(path):
                assert not name.startswith("textproc.testing"), f"{path.name}:{lineno} imports {name}"


BENCH_FILES = sorted((ROOT / "bench").glob("*.py"))


@pytest.mark.parametrize("path", BENCH_FILES, ids=lambda p: p.name)
def test_bench_never_imports_tests_nor_edits_sys_path(path: Path) -> None:
    for lineno, name in _imports(path):
        assert name.split(".")[0] not in {"tests", "bench"}, f"{path.name}:{lineno} imports {name}"
    assert "sys.path" not in path.read_text(encoding="utf-8"), f"{path.name} edits sys.path"


def test_importing_the_core_loads_no_process_layer() -> None:
    modules = ["textproc"] + [_module_name(p) for p in CORE_FILES]
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}:\n"
        "    importlib.import_module(m)\n"
        f"print(','.join(m for m in {FORBIDDEN!r} if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", f"the core pulled in {out.stdout.strip()}"


# what an engine imports of the constraints: the mask lookup (the table-only index, unpacked by
# textproc.engine.indexes), one request's walk and the reasoning budget over it
ENGINE_SIDE = ["textproc.engine", "textproc.engine.indexes", "textproc.core.constraints.index.table",
               "textproc.core.constraints.index.guide", "textproc.core.constraints.plans.reasoning_budget"]
COMPILER = ("textproc.core.constraints.compile", "textproc.core.constraints.schema",
            "textproc.core.constraints.regex", "textproc.core.constraints.automaton",
            "textproc.core.constraints.index.build", "textproc.core.constraints.index.states",
            "textproc.core.constraints.index.walks", "textproc.core.constraints.index.counted",
            "textproc.core.constraints.index.shift", "textproc.core.constraints.index.regions",
            "textproc.core.constraints.index.token_sets",
            "textproc.core.constraints.plans.forced_calls", "textproc.core.constraints.plans.strict_calls",
            "textproc.core.constraints.plans.free_text")


def test_the_engine_side_of_constraints_loads_no_compiler_regex_or_parser() -> None:
    """The engine's mask lookup imports neither the compiler, ``regex``, nor the parsers:
    registries and re-exports load on first use."""
    code = (
        "import importlib, sys\n"
        f"for m in {ENGINE_SIDE!r}:\n"
        "    importlib.import_module(m)\n"
        "print('\\n'.join(sorted(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    loaded = set(out.stdout.split())
    assert "textproc.core.constraints.index.table" in loaded  # the walk above imported something
    pulled = sorted(m for m in loaded if m == "regex" or m.startswith(("regex.", *COMPILER))
                    or m.startswith("textproc.core.parsing"))
    assert pulled == [], f"the engine side of constraints pulled in {pulled}"


def test_importing_the_parsers_scans_no_family() -> None:
    """The format registry loads the family modules on its first lookup, not at import."""
    code = (
        "import sys\n"
        "import textproc.core.parsing, textproc.core.pipeline\n"
        "before = [m for m in sys.modules if m.startswith('textproc.core.parsing.families.')]\n"
        "from textproc.core.parsing.formats import TOOL_FORMATS\n"
        "assert 'hermes' in TOOL_FORMATS\n"
        "after = [m for m in sys.modules if m.startswith('textproc.core.parsing.families.')]\n"
        "print(len(before), len(after))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    before, after = map(int, out.stdout.split())
    assert before == 0 and after > 10, (before, after)


API_FOLDERS = ("openai", "responses", "anthropic", "scale_out")
API_FILES = {"__init__.py", "routes.py", "bodies.py", "answers.py", "events.py"}


def test_every_http_api_folder_has_the_same_files() -> None:
    """One folder per API under textproc/http/, each with the same file names (a folder may add
    its own: ``openai/structured.py``, ``responses/tools.py``); ``server.py`` reaches an API only
    through its ``routes``."""
    http = PACKAGE / "http"
    folders = sorted(p.parent.name for p in http.glob("*/__init__.py"))
    assert folders == sorted(API_FOLDERS)
    for name in API_FOLDERS:
        assert API_FILES <= {p.name for p in (http / name).glob("*.py")}, name
    for lineno, module in _imports(http / "server.py"):
        if module.startswith(tuple(f"textproc.http.{n}" for n in API_FOLDERS)):
            assert module.endswith(".routes"), f"server.py:{lineno} imports {module}"


TEST_FILES = sorted((ROOT / "tests").rglob("*.py"))


@pytest.mark.parametrize("path", TEST_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_test_module_imports_another(path: Path) -> None:
    """Shared test code lives in tests/helpers/; a test module never imports a test module."""
    for lineno, name in _imports(path):
        if name.startswith("tests."):
            assert name.startswith("tests.helpers"), f"{path.name}:{lineno} imports {name}"


@functools.lru_cache(maxsize=1)
def _module_graph() -> tuple[dict[str, set[str]], list[tuple[Path, int]]]:
    """Module -> the textproc modules it imports (at the top, in a function or under
    ``if TYPE_CHECKING:``), and where each function-local import is."""
    modules = {_module_name(p): p for p in ALL_FILES}
    graph: dict[str, set[str]] = {}
    local: list[tuple[Path, int]] = []

    def targets(node: ast.Import | ast.ImportFrom) -> list[str]:
        if isinstance(node, ast.Import):
            return [alias.name for alias in node.names]
        module = node.module or ""  # `from pkg import sub` imports the submodule
        return [f"{module}.{a.name}" if f"{module}.{a.name}" in modules else module
                for a in node.names]

    for name, path in modules.items():
        edges: set[str] = set()
        stack: list[tuple[ast.AST, bool]] = [(ast.parse(path.read_text(encoding="utf-8")), False)]
        while stack:
            node, in_function = stack.pop()
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                if in_function:
                    local.append((path, node.lineno))
                edges |= {t for t in targets(node) if t in modules and t != name}
                continue
            inner = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            stack.extend((child, inner) for child in ast.iter_child_nodes(node))
        graph[name] = edges
    return graph, local


def test_no_import_cycle() -> None:
    """Cycles are broken by design, not hidden by importing inside a function or under
    ``if TYPE_CHECKING:``."""
    graph, _ = _module_graph()
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        if name in path:
            cycle = path[path.index(name):] + [name]
            raise AssertionError("import cycle: " + " -> ".join(cycle))
        if name in done:
            return
        for target in sorted(graph[name]):
            visit(target, path + [name])
        done.add(name)

    for name in sorted(graph):
        visit(name, [])


def test_function_local_imports_say_why() -> None:
    """An import inside a function is there to save start-up time (or to keep an optional
    dependency optional), and a comment says so: on its line, or above its group of imports."""
    _, local = _module_graph()
    for path, lineno in local:
        lines = path.read_text(encoding="utf-8").splitlines()
        above = lineno - 2
        while above >= 0 and (not lines[above].strip()
                              or lines[above].strip().startswith(("import ", "from "))):
            above -= 1
        assert "#" in lines[lineno - 1] or lines[above].strip().startswith("#"), (
            f"{path.relative_to(ROOT)}:{lineno} imports inside a function without saying why")


def test_the_service_never_imports_the_http_frontend() -> None:
    """The supervisor starts the frontends by their command lines (service/children.py)."""
    service = sorted((PACKAGE / "service").rglob("*.py"))
    assert len(service) > 5
    for path in service:
        for lineno, name in _imports(path):
            assert not name.startswith("textproc.http"), f"{path.name}:{lineno} imports {name}"
