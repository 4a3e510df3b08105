"""specviz/README.md's map of the code names every module under specviz/, and only modules that exist.

The map is the table under "Architecture: the code's map". Its first cell names one or more modules:
a path from the repository root (`specviz/models/loading.py`), then, in the same cell, bare file names
in that path's folder (`errors.py` after it is `specviz/models/errors.py`). Every `__init__.py` is left
out (a folder's docstring says what the folder is). Plain file reading: no import of specviz or torch.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "specviz" / "README.md"
MAP_HEADING = "## Architecture: the code's map"
CELL_SPLIT = re.compile(r"(?<!\\)\|")  # a cell ends at a "|" that is not escaped ("\|" inside code)
NAMED = re.compile(r"`([^`]+)`")


def map_rows(text: str) -> list[str]:
    """The table rows of the map's section (from its heading to the next "## " heading)."""
    start = text.index(MAP_HEADING)  # a missing heading fails here, saying which one
    end = text.find("\n## ", start + len(MAP_HEADING))
    section = text[start:end if end != -1 else len(text)]
    return [line for line in section.splitlines() if line.startswith("|")]


def names_in(first_cell: str) -> list[str]:
    """The modules a row's first cell names, as paths from the repository root."""
    folder, names = None, []
    for name in NAMED.findall(first_cell):
        name = name.strip()
        if name.startswith("specviz/"):
            folder = PurePosixPath(name).parent
            names.append(name)
        else:
            assert folder is not None, f"{name!r} comes before any specviz/… path in its cell: {first_cell!r}"
            names.append(str(folder / name))
    return names


def mapped_modules() -> dict[str, str]:
    """Every module the map names → the row that names it."""
    named = {}
    for row in map_rows(README.read_text(encoding="utf-8")):
        cells = CELL_SPLIT.split(row)
        if len(cells) < 3 or not NAMED.search(cells[1]):
            continue  # the header and its |---| line
        for name in names_in(cells[1]):
            named[name] = row[:120]
    return named


def package_modules() -> set[str]:
    package = ROOT / "specviz"
    return {path.relative_to(ROOT).as_posix() for path in package.rglob("*.py")
            if path.name != "__init__.py" and "__pycache__" not in path.parts}


def test_the_map_is_found_and_names_modules_as_files():
    named = mapped_modules()
    assert len(named) > 50, f"the map in {README} looks empty or unparsed: {sorted(named)}"
    folders = [name for name in named if not name.endswith(".py")]
    assert not folders, f"name each module as a .py file, not a folder or a bare name: {folders}"


def test_every_module_under_specviz_is_in_the_map():
    missing = sorted(package_modules() - set(mapped_modules()))
    assert not missing, f"modules missing from the map in specviz/README.md: {missing}"


def test_the_map_names_only_modules_that_exist():
    named = mapped_modules()
    gone = {name: named[name] for name in sorted(set(named) - package_modules())}
    assert not gone, f"the map in specviz/README.md names modules that do not exist: {gone}"


def test_the_parser_reads_both_ways_of_naming_a_module():
    cell = " `specviz/models/loading.py`, `errors.py` "
    assert names_in(cell) == ["specviz/models/loading.py", "specviz/models/errors.py"]
    assert names_in(" `specviz/__main__.py`, `specviz/cli/arguments.py`, `commands.py` ") == [
        "specviz/__main__.py", "specviz/cli/arguments.py", "specviz/cli/commands.py"]
