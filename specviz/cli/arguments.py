"""The command line's parser. Every run setting's flag, type, choices, default and help come from its
declaration (specviz.app.settings), so `generate` and the page cannot disagree; what only the CLI has
(the pair's ids and device, bench's lists, train's recipe) is written here."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Callable, Mapping

from specviz.analysis.bench import BENCH_ENGINE, BenchConfig
from specviz.analysis.selfcheck_measures import SelfCheckConfig
from specviz.app.settings import SETTING, SETTINGS
from specviz.models.presets import DEFAULT_PRESET, PRESETS, preset_name


def add_pair_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pair", default=None, help=f"preset: {', '.join(PRESETS)} (default {DEFAULT_PRESET})")
    parser.add_argument("--target", default=None, help="target model: hub id or local folder (with --draft)")
    parser.add_argument("--draft", default=None, help="draft model: hub id or local folder (with --target)")
    parser.add_argument("--head", default=None, metavar="FOLDER",
                        help="a head drafter's folder instead of the pair's own, e.g. one `train --recipe head --device "
                             "cuda` wrote, to bench it against the shipped one")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when present)")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (1 gives the steadiest timings)")
    parser.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default=None,
                        help="weights' precision (default: bfloat16 on CUDA, float32 on every CPU, or "
                             "$SPECVIZ_PRECISION); in each a verify rounds exactly like a step, so greedy lanes are "
                             "identical by construction (`selfcheck` checks it); on a CPU specviz's float32 kernels "
                             "decode faster than bfloat16, even with native bf16; float16: CUDA only")
    parser.add_argument("--int8-drafters", action=argparse.BooleanOptionalAction, default=None,
                        help="run the draft model and the head with int8 weights on a CPU, where they are bound by "
                             "memory (default: the pair's choice, on for the default pair); the target is never "
                             "changed, so the output stays exactly the target's")


# Bench's own defaults where they differ from a single run's: longer runs, and each prompt's own chat setting.
BENCH_DEFAULTS: dict[str, Any] = {"max_new_tokens": BENCH_ENGINE.max_new_tokens, "chat": BenchConfig.chat}
GENERATE_SETTINGS = tuple(setting.name for setting in SETTINGS if setting.cli)
BENCH_SETTINGS = tuple(setting.name for setting in SETTINGS if setting.cli and setting.bench == "same")


def add_setting_arguments(parser: argparse.ArgumentParser, names: tuple[str, ...],
                          defaults: Mapping[str, Any] | None = None) -> None:
    """A flag per declared setting, typed by its parse rule, at its declared default unless `defaults`
    gives the command's own."""
    defaults = defaults or {}
    for name in names:
        setting = SETTING[name]
        options: dict[str, Any] = {"default": defaults.get(name, setting.default), "help": setting.cli_help or None}
        if setting.parse == "bool":
            options["action"] = argparse.BooleanOptionalAction
        elif setting.parse == "choice":
            options["choices"] = [value for _, value in setting.choices]
        elif setting.parse in ("whole", "real"):
            options["type"] = int if setting.parse == "whole" else float
        if setting.default is None:  # no default: the command needs it (the prompt), as its flag or on its own
            parser.add_argument(given_dest(name), nargs="?", default=None, metavar=name.upper(),
                                help=f"{setting.cli_help} (the same as {setting.flag})")
            options = {"default": None, "help": setting.cli_help}
        parser.add_argument(setting.flag, **options)


def given_dest(name: str) -> str:
    """Where a needed setting given on its own (positionally) lands, before parse_arguments settles it."""
    return f"{name}_given"


def parse_arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, with each needed setting (the prompt) taken from its flag or from the text given on its own:
    `generate "Why is the sky blue?"` does what `generate --prompt "Why is the sky blue?"` does; neither is an
    error that says how to give it."""
    parser = build_parser()
    args = parser.parse_args(argv)
    for setting in SETTINGS:
        if not hasattr(args, given_dest(setting.name)):
            continue
        given, flagged = getattr(args, given_dest(setting.name)), getattr(args, setting.name)
        delattr(args, given_dest(setting.name))
        if given is not None and flagged is not None:
            parser.error(f"the {setting.name} was given twice, on its own and as {setting.flag}: give it once")
        if given is None and flagged is None:
            parser.error(f'a {setting.name} is needed: python -m specviz {args.command} "your {setting.name}" '
                         f'(or {setting.flag} "your {setting.name}")')
        setattr(args, setting.name, flagged if flagged is not None else given)
    return args


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    """Engine options the command line has and the page does not."""
    parser.add_argument("--full-draft-head", action="store_true",
                        help="draft with the draft's whole output head even where it ships head_rows.json")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m specviz", description="Speculative decoding, visualised.")
    commands = parser.add_subparsers(dest="command", required=True)

    generate = commands.add_parser("generate", help="run the baseline and speculative lanes on one prompt")
    add_pair_arguments(generate)
    add_setting_arguments(generate, GENERATE_SETTINGS)
    add_engine_arguments(generate)
    generate.add_argument("--ignore-eos", action="store_true", help="keep going past end-of-sequence")
    generate.add_argument("--save", default=None, metavar="RUN.json", help="save the whole run for `replay`")
    generate.add_argument("--json", action="store_true", help="print one JSON object instead of text")

    replay = commands.add_parser("replay", help="play a saved run back at its recorded speed (no models needed)")
    replay.add_argument("file", help="a run saved with `generate --save` or the app's download")
    replay.add_argument("--speed", type=float, default=1.0, help="1 = as recorded, 2 = twice as fast, inf = at once")
    replay.add_argument("--json", action="store_true", help="print the run's figures as JSON instead of playing it")

    bench = commands.add_parser("bench", help="γ sweep over several prompts, medians with spread")
    add_pair_arguments(bench)
    # What a bench sweeps is a list of its own (Setting.bench == "list"): γ, temperature and the tree budget.
    bench.add_argument("--gammas", type=separated(int), default=BenchConfig.gammas, help="comma-separated γ values")
    bench.add_argument("--prompts", default=None, help="JSON list or one-prompt-per-line file (default: the pair's examples)")
    bench.add_argument("--repeats", type=int, default=BenchConfig.repeats)
    bench.add_argument("--temperature", type=separated(float), default=BenchConfig.temperatures,
                       help="comma-separated temperatures, e.g. 0,0.7")
    bench.add_argument("--tree", type=separated(int), default=BenchConfig.trees,
                       help=f"comma-separated tree budgets, e.g. 0,4,8 (0 = a chain): {SETTING['tree'].help}")
    bench.add_argument("--ignore-eos", action="store_true", help="time max-new-tokens every run, past end-of-sequence")
    bench.add_argument("--against-hf", action="store_true", help="also time transformers' generate(assistant_model=draft)")
    bench.add_argument("--hf-dtype", choices=("float32", "bfloat16"), default=None,
                       help="with --against-hf: transformers' side in this precision (default: the same as ours), e.g. "
                            "bfloat16 to compare ours in float32 with what a user of a CPU with native bf16 may run")
    add_setting_arguments(bench, BENCH_SETTINGS, BENCH_DEFAULTS)
    add_engine_arguments(bench)
    bench.add_argument("--json", action="store_true")

    profile = commands.add_parser("profile", help="where the target's forward spends its time: a step against "
                                                  "(γ+1)-token verifies, in each precision")
    add_pair_arguments(profile)
    profile.add_argument("--tokens", type=separated(int), default=(1, 2, 4, 5, 7),
                         help="comma-separated new tokens per forward (1 = a step)")
    profile.add_argument("--context", type=int, default=100, help="tokens already in the cache")
    profile.add_argument("--repeats", type=int, default=12, help="plain timed forwards per token count")
    profile.add_argument("--tree", type=separated(int), default=(),
                         help="comma-separated tree budgets: a verify of the last id and N draft-tree nodes under a "
                              "tree mask, per budget")
    profile.add_argument("--rounds", action="store_true",
                         help="instead: a speculative lane's rounds, the time each spends outside model forwards "
                              "(the host's) by stage, and the host reads a round makes")
    profile.add_argument("--drafter", default=None, help="with --rounds: the drafter (default: the pair's own)")
    profile.add_argument("--gamma", type=int, default=3, help="with --rounds: γ")
    profile.add_argument("--max-new-tokens", type=int, default=48, help="with --rounds: new tokens a prompt")
    profile.add_argument("--prompts", type=int, default=6,
                         help="with --rounds: how many of the pair's held-out prompts (its examples where it has none)")

    train = commands.add_parser("train", help="distil the default pair's draft (or train the tiny-code pair)")
    # type: the default pair's old name (embedded) is still taken, as its current one
    train.add_argument("--recipe", type=preset_name, choices=("smollm2-135m", "head", "tiny-code"), default="smollm2-135m",
                       help="smollm2-135m: distil a draft for SmolLM2-135M-Instruct (after --recipe head: it learns "
                            "from the head's teacher passes); head: train the head drafter that reads its hidden "
                            "states; tiny-code: the Python-code pair")
    train.add_argument("--out", default=None,
                       help="output folder (default: assets/smollm2-draft, assets/smollm2-head or assets/tiny-code-pair)")
    train.add_argument("--work-dir", default=None, help="data cache and checkpoints (resumable)")
    train.add_argument("--steps", type=int, default=None, help="smollm2-135m: draft optimiser steps")
    train.add_argument("--epochs", type=float, default=None, help="head: passes over the teacher data")
    train.add_argument("--init-from", default=None, metavar="FOLDER",
                       help="head: go on from this trained head (new requests of the target's own only; "
                            "give another --seed)")
    train.add_argument("--lr", type=float, default=None, help="head: peak learning rate")
    train.add_argument("--target-layers", default=None, metavar="I,J,...",
                       help="head: the target's lower layers it reads besides the final one (indices into its "
                            "hidden_states, e.g. 2,15,27; EAGLE-3); 'none' for the final state alone")
    train.add_argument("--minutes", type=float, default=None,
                       help="head: a CPU budget per phase (teacher pass, training); with --device, the command's "
                            "whole budget, shared by its phases (rerun to go on); 0 = none")
    train.add_argument("--device", default=None,
                       help="head: the GPU recipe on this device (cuda; cpu runs it at dry-run sizes): the target writes "
                            "and answers its own requests, scores them into shards and the head trains with "
                            "training-time test (without --device: the CPU recipe that trained the shipped head)")
    train.add_argument("--phase", default=None,  # checked by the recipe's config (torch-free --help)
                       help="head with --device: generate, score, train or all (the default); each resumes from its files")
    train.add_argument("--target", default=None, metavar="FOLDER", help="head with --device: the target (default: the default pair's)")
    train.add_argument("--requests", type=int, default=None, help="head with --device: requests the target samples")
    for flag in ("--target-steps", "--seqkd-steps", "--distil-steps"):
        train.add_argument(flag, type=int, default=None, help="tiny-code only")
    train.add_argument("--seed", type=int, default=None)
    train.add_argument("--threads", type=int, default=None)

    add_selfcheck_parser(commands)
    commands.add_parser("setup", help="convert the default target from the installed wheel now (else on first use)")
    add_gpurun_parser(commands)
    return parser


def add_selfcheck_parser(commands) -> None:
    check = SelfCheckConfig()  # the check's defaults have one home; the flags spell them
    selfcheck = commands.add_parser(
        "selfcheck", help="check a machine (a newly lent GPU above all) under a deadline: greedy identity per precision, "
                          "the bench for every drafter, the target alone against generate(), a profile")
    selfcheck.add_argument("--out", type=Path, default=None, help="where its files go (default: a new temporary folder)")
    selfcheck.add_argument("--device", default=None, help="cuda, cpu, … (default: CUDA when present)")
    selfcheck.add_argument("--pair", default=None)
    selfcheck.add_argument("--minutes", type=float, default=check.minutes, help="the whole check, the target's rebuild included")
    selfcheck.add_argument("--quick", action="store_true", help="2 prompts, 16 tokens, γ 3: a minute or two, not minutes")
    selfcheck.add_argument("--precisions", type=separated(), help="comma-separated (default: the device's)")
    selfcheck.add_argument("--gammas", type=separated(int), default=check.gammas, help="greedy identity at each")
    selfcheck.add_argument("--bench-gammas", type=separated(int), default=check.bench_gammas)
    selfcheck.add_argument("--bench-trees", type=separated(int), default=check.bench_trees,
                           help="tree budgets the bench runs at every γ (0 = a chain)")
    selfcheck.add_argument("--temperatures", type=separated(float), default=check.temperatures)
    selfcheck.add_argument("--max-new-tokens", type=int, default=check.max_new_tokens)
    selfcheck.add_argument("--num-prompts", type=int, default=None, help="per prompt set (default: all, as time allows)")
    selfcheck.add_argument("--profile-tokens", type=separated(int), default=check.profile_tokens)
    selfcheck.add_argument("--drafters", type=separated(),
                           help="comma-separated (default: every one, the pair's own first)")
    selfcheck.add_argument("--skip", type=separated(), default=check.skip,
                           help="comma-separated phases to leave out, by their first words")
    selfcheck.add_argument("--profile-repeats", type=int, default=check.profile_repeats)
    selfcheck.add_argument("--threads", type=int, default=1, help="CPU threads on a CPU (0: all); a GPU run keeps all")


def add_gpurun_parser(commands) -> None:
    gpurun = commands.add_parser("gpurun", help="the prepared GPU run: pack what an offline GPU machine needs")
    steps = gpurun.add_subparsers(dest="step", required=True)
    pack_step = steps.add_parser("pack", help="the GGUF and the wheels as parts, one transfer each, and the calls")
    pack_step.add_argument("--dest", type=Path, default=Path(".gpu"), help="an ignored folder (default .gpu)")
    pack_step.add_argument("--part-mib", type=int, default=None, help="part size (default: what the tree leaves)")
    pack_step.add_argument("--minutes", type=float, default=SelfCheckConfig.minutes, help="the last call's selfcheck budget")


def separated(kind: Callable[[str], Any] = str) -> Callable[[str], tuple]:
    """argparse's `type` for a comma-separated flag: "0,0.7" → (0.0, 0.7); a flag left out keeps its default."""

    def parse(text: str) -> tuple:
        try:
            values = tuple(kind(part) for part in text.split(",") if part.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be comma-separated numbers, got {text!r}") from None
        if not values:
            raise argparse.ArgumentTypeError("is empty")
        return values

    return parse


