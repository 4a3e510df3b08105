"""python3 -m specviz.gpu stash PART | run | train: the lent machine's side of a prepared GPU run.

stash PART: keep a carried part (`.gpu/part-<i>`) outside the tree, checked (every call but the last).
run: stash the last part, join and check the payload, install its wheels into a folder first on PYTHONPATH,
then `python -m specviz selfcheck` under a hard time limit, its table printed last (also when cut).
train: the same set-up, then the head's GPU recipe, its work folder outside the tree so that the next call
on a warm machine resumes it, its head written to $OUT/head.
assets/bench/README.md ('GPU run') and assets/smollm2-head/README.md have the calls.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from specviz.gpu.parts import GGUF_ENV, assemble, install_wheels, stash

REPO = Path(__file__).resolve().parents[2]
STORE = Path("/tmp/specviz-parts")  # outside the tree, which every call replaces
WORK = Path("/tmp/specviz-gpurun")
GRACE_S = 45  # past the self-check's own deadline before it is killed (it stops itself between runs)
TABLE = "table.txt"
STDERR = "stderr.txt"


def run_child(args: argparse.Namespace, command: list[str], env: dict[str, str]) -> int:
    """A `python -m specviz` process, killed (its whole group) if it outlives its minutes and the grace. Its
    stderr (progress bars, the profiler's chatter) goes to a file: the reply shows the tail of stdout."""
    what = command[0]  # "selfcheck", "train"
    command = [sys.executable, "-m", "specviz", *command]
    print("$", " ".join(command), flush=True)
    with open(args.out / STDERR, "w") as stderr:
        process = subprocess.Popen(command, cwd=REPO, env=env, stderr=stderr, start_new_session=True)
        try:
            code = process.wait(timeout=args.minutes * 60 + GRACE_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            print(f"gpurun: {what} outran {args.minutes} min + {GRACE_S} s and was killed; what it wrote is in "
                  f"{args.out}", flush=True)
            code = 124
    if code != 0:
        print("".join((args.out / STDERR).read_text(errors="replace").splitlines(keepends=True)[-25:]), flush=True)
    return code


def set_up(args: argparse.Namespace) -> dict[str, str]:
    """Stash the last part, join and check the payload, install its wheels: the child's environment (the
    carried wheels first on the path, the target converted from the carried GGUF, nothing from the network)."""
    if args.part:
        print(f"gpurun: stashed; {args.store} holds parts {stash(args.part, args.store)}", flush=True)
    site = args.work / "site"
    files = assemble(args.store, site)
    wheels = [path for name, path in files.items() if name.endswith(".whl")]
    install_wheels(wheels, site)
    print(f"gpurun: payload checked and unpacked ({len(files)} files), wheels installed: "
          f"{', '.join(path.name for path in wheels) or 'none'} ({time.monotonic() - args.started:.0f} s)", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    gguf = next((path for name, path in files.items() if name.endswith(".gguf")), None)
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO), os.environ.get("PYTHONPATH", "")]),
            "SPECVIZ_CACHE": str(args.work / "cache"), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            "GRADIO_ANALYTICS_ENABLED": "False", "PYTHONUNBUFFERED": "1", **({GGUF_ENV: str(gguf)} if gguf else {})}


def run(args: argparse.Namespace, env: dict[str, str]) -> int:
    code = run_child(args, ["selfcheck", "--out", str(args.out), "--device", args.device,
                            "--minutes", str(args.minutes), *args.extra], env)
    table = args.out / TABLE
    if code != 0:  # the self-check prints its table last; one it did not finish has only the table it wrote
        print(table.read_text() if table.is_file() else "gpurun: no table was written", flush=True)
    return code


def train(args: argparse.Namespace, env: dict[str, str]) -> int:
    """The head's GPU recipe; what its phases did so far (progress.json) comes back whether or not it trained."""
    work = args.work / "head-gpu"
    code = run_child(args, ["train", "--recipe", "head", "--device", args.device, "--work-dir", str(work),
                            "--out", str(args.out / "head"), "--minutes", str(args.minutes), *args.extra], env)
    progress = work / "progress.json"
    if progress.is_file():
        shutil.copy(progress, args.out / progress.name)
        print(f"gpurun: progress {progress.read_text()}", flush=True)
    return code


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python3 -m specviz.gpu")
    commands = parser.add_subparsers(dest="command", required=True)
    stash_command = commands.add_parser("stash", help="keep a carried part outside the tree, checked")
    stash_command.add_argument("part", type=Path, help="the carried folder, e.g. .gpu/part-1")
    stash_command.add_argument("--store", type=Path, default=STORE)
    for name, what, minutes in (("run", "self-check", 7.0), ("train", "train the head", 9.0)):
        command = commands.add_parser(name, help=f"stash the last part, assemble, install, {what}")
        command.add_argument("--part", type=Path, default=None, help="the last carried part (else all are stashed)")
        command.add_argument("--store", type=Path, default=STORE)
        command.add_argument("--work", type=Path, default=WORK, help="unpacked payload, wheels, converted target")
        command.add_argument("--out", type=Path, required=True, help="records, logs and the table ($OUT)")
        command.add_argument("--device", default="cuda")
        command.add_argument("--minutes", type=float, default=minutes,
                             help="the child's whole budget, setup included; it is killed 45 s past it")
        command.add_argument("extra", nargs=argparse.REMAINDER,
                             help=f"after --: more `{'selfcheck' if name == 'run' else 'train --recipe head'}` flags")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "stash":
        print(f"gpurun: {args.store} holds parts {stash(args.part, args.store)}")
        return 0
    args.extra = [flag for flag in args.extra if flag != "--"]
    args.started = time.monotonic()
    code = (run if args.command == "run" else train)(args, set_up(args))
    print(f"gpurun: exit {code} after {time.monotonic() - args.started:.0f} s", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
