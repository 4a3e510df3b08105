"""The package's folders are its floors: imports point down them only, gradio stays in the page
modules and plotly in the app. Read from the source (ast), so a lazy import counts too."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "specviz"
# Higher imports lower, never the reverse; analysis and training sit side by side and ignore each other.
# gpu: the GPU run's luggage, standard library only (it runs before the carried wheels are installed).
FLOORS = {"catalogue": 0, "gpu": 0, "models": 1, "decoding": 2, "analysis": 3, "training": 3, "app": 4, "cli": 5, "__main__": 5}
GRADIO_MODULES = {"app/ui.py", "app/zerogpu.py", "app/ui_sections.py", "app/ui_handlers.py", "app/section_jobs.py",
                  "app/runs_page.py", "app/replay_page.py",
                  *(f"app/{section}/page.py" for section in ("run_section", "inspector", "step_mode", "exactness_lab", "theory_explorer",
                                                             "gamma_sweep", "charts", "drafters_about"))}


def imports_of(path: Path) -> list[tuple[str, int]]:
    """(module, line) for every import in the file, including those inside functions."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "specviz":
                found += [(f"specviz.{alias.name}", node.lineno) for alias in node.names]
            else:
                found.append((node.module, node.lineno))
        elif isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
    return found


def modules() -> list[Path]:
    return [path for path in PACKAGE.rglob("*.py") if path.name != "__init__.py"]


def test_imports_point_down_the_floors():
    upward = []
    for path in modules():
        mine = path.relative_to(PACKAGE).with_suffix("").parts[0]
        for module, line in imports_of(path):
            parts = module.split(".")
            if parts[0] != "specviz" or len(parts) < 2 or parts[1] == mine:
                continue
            other = parts[1]
            sideways = {mine, other} == {"analysis", "training"}
            if FLOORS[other] > FLOORS[mine] or sideways:
                upward.append(f"{path.relative_to(PACKAGE)}:{line} imports {module}")
    assert upward == []
    assert set(FLOORS) >= {path.relative_to(PACKAGE).with_suffix("").parts[0] for path in modules()}


def test_gradio_only_in_the_page_modules_and_plotly_only_in_the_app():
    for path in modules():
        name = path.relative_to(PACKAGE).as_posix()
        roots = {module.split(".")[0] for module, _ in imports_of(path)}
        if "gradio" in roots:
            assert name in GRADIO_MODULES, name
        if "plotly" in roots:
            assert name.startswith("app/"), name


def module_name(path: Path, root: Path = PACKAGE.parent) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def specviz_imports(path: Path, known: set[str], root: Path = PACKAGE.parent) -> set[str]:
    """The specviz modules a file imports anywhere in it (in functions and under TYPE_CHECKING too):
    `from specviz.x import y` is specviz.x.y where that is a module, else specviz.x."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found |= {f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in known else node.module
                      for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    return {module for module in found if module in known and module != "specviz"} - {module_name(path, root)}


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Module → the specviz modules it imports."""
    paths = list(package.rglob("*.py"))
    known = {module_name(path, package.parent) for path in paths}
    return {module_name(path, package.parent): specviz_imports(path, known, package.parent) for path in paths}


def mutual_imports(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{a} <-> {b}" for a, imported in graph.items() for b in imported if a < b and a in graph.get(b, ()))


def import_cycles(graph: dict[str, set[str]]) -> list[str]:
    done: set[str] = set()
    cycles = []

    def visit(module: str, path: list[str]) -> None:
        for other in sorted(graph[module]):
            if other in path:
                cycles.append(" -> ".join(path[path.index(other):] + [other]))
            elif other not in done:
                visit(other, path + [other])
        done.add(module)

    for module in sorted(graph):
        if module not in done:
            visit(module, [module])
    return cycles


def test_no_two_modules_import_each_other():
    """A module that imports the one importing it is two jobs in two rooms, or a piece on the wrong
    floor: move the shared piece down into a module of its own. A late import or a type hint counts too."""
    assert mutual_imports(import_graph()) == []


def test_the_import_graph_has_no_cycles():
    assert import_cycles(import_graph()) == []


def test_the_checks_see_imports_in_functions_and_type_hints(tmp_path):
    """The checks can fail: a pair that imports each other only inside a function and under
    TYPE_CHECKING is caught, and so are a ring of three and the import made inside a function."""
    package = tmp_path / "specviz"
    (package / "decoding").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "decoding" / "__init__.py").write_text("")
    (package / "decoding" / "engine.py").write_text("def run():\n    from specviz.decoding.drafters import Drafter\n")
    (package / "decoding" / "drafters.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from specviz.decoding import engine\nclass Drafter: ...\n")
    (package / "decoding" / "a.py").write_text("import specviz.decoding.b\n")
    (package / "decoding" / "b.py").write_text("from specviz.decoding.c import x\n")
    (package / "decoding" / "c.py").write_text("from specviz.decoding import a\nx = 1\n")
    graph = import_graph(package)
    assert mutual_imports(graph) == ["specviz.decoding.drafters <-> specviz.decoding.engine"]
    assert "specviz.decoding.a -> specviz.decoding.b -> specviz.decoding.c -> specviz.decoding.a" in import_cycles(graph)
    assert late_imports(package / "decoding" / "engine.py") == [("specviz.decoding.drafters", 2)]


# Modules whose functions may import, and why. Any other import made inside a function is a cycle
# dodged or a slow library put off: both want the module on another floor, or the import at the top.
LATE_IMPORTS = {  # a module or a package, by its dotted name under specviz
    "cli": "each command imports what only it runs (training, profiling, the bench, the renderers) when it runs",
}


def late_imports(path: Path) -> list[tuple[str, int]]:
    """(module, line) of every import inside a function or method of the file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for inner in ast.walk(node):
                if isinstance(inner, ast.ImportFrom):
                    found.append((inner.module or ".", inner.lineno))
                elif isinstance(inner, ast.Import):
                    found += [(alias.name, inner.lineno) for alias in inner.names]
    return sorted(set(found), key=lambda item: item[1])


def test_no_imports_inside_functions_except_the_listed_ones():
    late = []
    for path in modules():
        name = path.relative_to(PACKAGE).as_posix()
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if any(".".join(parts[:depth]) in LATE_IMPORTS for depth in range(1, len(parts) + 1)):
            continue
        late += [f"{name}:{line} imports {module}" for module, line in late_imports(path)]
    assert late == []
