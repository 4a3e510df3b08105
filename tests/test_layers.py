"""The package's folders are its floors: imports point down them only, gradio stays in the page
modules and plotly in the app. Read from the source (ast), so a lazy import counts too."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "specviz"
# Higher imports lower, never the reverse; analysis and training sit side by side and ignore each other.
FLOORS = {"catalogue": 0, "models": 1, "decoding": 2, "analysis": 3, "training": 3, "app": 4, "cli": 5, "__main__": 5}
GRADIO_MODULES = {"app/ui.py", "app/ui_sections.py", "app/ui_handlers.py", "app/teach.py", "app/teach_sections.py",
                  "app/teach_handlers.py"}


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
