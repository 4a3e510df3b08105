"""python3 -m specviz.gpu stash PART | run: the lent machine's side of the prepared GPU run.

stash PART: keep a carried part (`.gpu/part-<i>`) outside the tree, checked (every call but the last).
run: stash the last part, join and check the payload, install its wheels into a folder of their own,
then `python -m specviz gpurun measure` under a hard time limit with that folder first on PYTHONPATH,
and print its table last (also when the limit cut it). assets/bench/README.md, 'GPU run', has the calls.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from specviz.gpu.parts import GGUF_ENV, assemble, install_wheels, stash

REPO = Path(__file__).resolve().parents[2]
STORE = Path("/tmp/specviz-parts")  # outside the tree, which every call replaces
WORK = Path("/tmp/specviz-gpurun")
GRACE_S = 45  # past the measure's own deadline before it is killed (it stops itself between runs)
TABLE = "table.txt"
STDERR = "stderr.txt"


def run_measure(args: argparse.Namespace, site: Path, gguf: Path | None) -> int:
    """The measuring process, killed (its whole group) if it outlives its minutes and the grace. Its
    stderr (progress bars, the profiler's chatter) goes to a file: the reply shows the tail of stdout."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO), os.environ.get("PYTHONPATH", "")]),
           "SPECVIZ_CACHE": str(args.work / "cache"), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "GRADIO_ANALYTICS_ENABLED": "False", "PYTHONUNBUFFERED": "1", **({GGUF_ENV: str(gguf)} if gguf else {})}
    command = [sys.executable, "-m", "specviz", "gpurun", "measure", "--out", str(args.out), "--device", args.device,
               "--minutes", str(args.minutes), *args.measure]
    print("$", " ".join(command), flush=True)
    with open(args.out / STDERR, "w") as stderr:
        process = subprocess.Popen(command, cwd=REPO, env=env, stderr=stderr, start_new_session=True)
        try:
            code = process.wait(timeout=args.minutes * 60 + GRACE_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            print(f"gpurun: the measure outran {args.minutes} min + {GRACE_S} s and was killed; what it wrote is in "
                  f"{args.out}", flush=True)
            code = 124
    if code != 0:
        print("".join((args.out / STDERR).read_text(errors="replace").splitlines(keepends=True)[-25:]), flush=True)
    return code


def run(args: argparse.Namespace) -> int:
    started = time.monotonic()
    if args.part:
        print(f"gpurun: stashed; {args.store} holds parts {stash(args.part, args.store)}", flush=True)
    site = args.work / "site"
    files = assemble(args.store, site)
    wheels = [path for name, path in files.items() if name.endswith(".whl")]
    install_wheels(wheels, site)
    print(f"gpurun: payload checked and unpacked ({len(files)} files), wheels installed: "
          f"{', '.join(path.name for path in wheels) or 'none'} ({time.monotonic() - started:.0f} s)", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    code = run_measure(args, site, next((path for name, path in files.items() if name.endswith(".gguf")), None))
    table = args.out / TABLE
    print(table.read_text() if table.is_file() else "gpurun: no table was written", flush=True)
    print(f"gpurun: exit {code} after {time.monotonic() - started:.0f} s", flush=True)
    return code


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python3 -m specviz.gpu")
    commands = parser.add_subparsers(dest="command", required=True)
    stash_command = commands.add_parser("stash", help="keep a carried part outside the tree, checked")
    stash_command.add_argument("part", type=Path, help="the carried folder, e.g. .gpu/part-1")
    stash_command.add_argument("--store", type=Path, default=STORE)
    run_command = commands.add_parser("run", help="stash the last part, assemble, install, measure")
    run_command.add_argument("--part", type=Path, default=None, help="the last carried part (else all are stashed)")
    run_command.add_argument("--store", type=Path, default=STORE)
    run_command.add_argument("--work", type=Path, default=WORK, help="unpacked payload, wheels, converted target")
    run_command.add_argument("--out", type=Path, required=True, help="records, logs and the table ($OUT)")
    run_command.add_argument("--device", default="cuda")
    run_command.add_argument("--minutes", type=float, default=7.0, help="the measure's whole budget, setup included")
    run_command.add_argument("measure", nargs=argparse.REMAINDER, help="after --: more `gpurun measure` flags")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "stash":
        print(f"gpurun: {args.store} holds parts {stash(args.part, args.store)}")
        return 0
    args.measure = [flag for flag in args.measure if flag != "--"]
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
