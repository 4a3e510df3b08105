"""python -m specviz generate | replay | bench | profile | train | setup | selfcheck"""

from __future__ import annotations

import argparse
import json
import os
import sys

from specviz.catalogue import DEFAULT_DRAFTER, DRAFTER_CATALOGUE, DRAFTER_NAMES, drafter_info
from specviz.app.palette import ANSI, ANSI_RESET


# The CLI never needs the network for the offline pairs; keep libraries from phoning home.
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")


def add_pair_arguments(parser: argparse.ArgumentParser) -> None:
    from specviz.models.presets import DEFAULT_PRESET, PRESETS

    parser.add_argument("--pair", default=None, help=f"preset: {', '.join(PRESETS)} (default {DEFAULT_PRESET})")
    parser.add_argument("--target", default=None, help="target model: hub id or local folder (with --draft)")
    parser.add_argument("--draft", default=None, help="draft model: hub id or local folder (with --target)")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when present)")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (1 gives the steadiest timings)")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default=None,
                        help="weights' precision (default: bfloat16 on CUDA and on CPUs with native bf16, else "
                             "float32, or $SPECVIZ_PRECISION); in both the target's verify rounds exactly like a step on a "
                             "CPU (greedy lanes identical by construction; `selfcheck` measures it elsewhere); bfloat16 "
                             "is faster only where the CPU or GPU has native bf16")
    parser.add_argument("--int8-drafters", action=argparse.BooleanOptionalAction, default=None,
                        help="run the draft model and the head with int8 weights on a CPU, where they are bound by "
                             "memory (default: the pair's choice, on for the default pair); the target is never "
                             "changed, so the output stays exactly the target's")


def add_sampling_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--top-k", type=int, default=0, help="0 = off")
    parser.add_argument("--top-p", type=float, default=1.0, help="1 = off")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--chat", action=argparse.BooleanOptionalAction, default=None,
        help="wrap prompts in the pair's chat template (default: yes when the pair has one)",
    )
    parser.add_argument(
        "--full-draft-head", action="store_true",
        help="draft with the draft's whole output head even where it ships head_rows.json",
    )
    parser.add_argument("--drafter", choices=DRAFTER_NAMES, default=None,
                        help="; ".join(f"{info.name}: {info.description}" for info in DRAFTER_CATALOGUE)
                        + f" (default: the pair's own: head on the default pair, else {DEFAULT_DRAFTER})")
    parser.add_argument("--ngram", type=int, default=3, help="prompt lookup: longest n-gram to match (1–8)")
    parser.add_argument("--draft-confidence", type=float, default=None,
                        help="stop a round's drafting after a token the drafter was less sure of "
                             "(0 = off; default: the engine's, 0.5)")
    parser.add_argument("--rivals", type=int, default=None,
                        help="greedy: beside a first draft the drafter is unsure of, offer its next N likeliest "
                             "tokens too, judged in the same verify (0 = off; default: the engine's)")
    parser.add_argument("--gamma-schedule", choices=("constant", "heuristic"), default="constant",
                        help="heuristic: transformers' schedule (γ + 2 after a fully accepted round, else γ − 1)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m specviz", description="Speculative decoding, visualised.")
    commands = parser.add_subparsers(dest="command", required=True)

    generate = commands.add_parser("generate", help="run the baseline and speculative lanes on one prompt")
    generate.add_argument("--prompt", required=True)
    add_pair_arguments(generate)
    generate.add_argument("--gamma", type=int, default=None, help="tokens drafted per round (γ; default: the engine's, 3)")
    generate.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    add_sampling_arguments(generate)
    generate.add_argument("--max-new-tokens", type=int, default=64)
    generate.add_argument("--ignore-eos", action="store_true", help="keep going past end-of-sequence")
    generate.add_argument("--reference", action="store_true",
                          help="add a lane running transformers' own generate() on the same pair and settings")
    generate.add_argument("--save", default=None, metavar="RUN.json", help="save the whole run for `replay`")
    generate.add_argument("--json", action="store_true", help="print one JSON object instead of text")

    replay = commands.add_parser("replay", help="play a saved run back at its recorded speed (no models needed)")
    replay.add_argument("file", help="a run saved with `generate --save` or the app's download")
    replay.add_argument("--speed", type=float, default=1.0, help="1 = as recorded, 2 = twice as fast, inf = at once")
    replay.add_argument("--json", action="store_true", help="print the run's figures as JSON instead of playing it")

    bench = commands.add_parser("bench", help="γ sweep over several prompts, medians with spread")
    add_pair_arguments(bench)
    bench.add_argument("--gammas", default="1,2,3,4,6,8", help="comma-separated γ values")
    bench.add_argument("--prompts", default=None, help="JSON list or one-prompt-per-line file (default: the pair's examples)")
    bench.add_argument("--repeats", type=int, default=3)
    bench.add_argument("--max-new-tokens", type=int, default=128)
    bench.add_argument("--temperature", default="0", help="comma-separated temperatures, e.g. 0,0.7")
    bench.add_argument("--ignore-eos", action="store_true", help="time max-new-tokens every run, past end-of-sequence")
    bench.add_argument("--against-hf", action="store_true", help="also time transformers' generate(assistant_model=draft)")
    add_sampling_arguments(bench)
    bench.add_argument("--json", action="store_true")

    profile = commands.add_parser("profile", help="where the target's forward spends its time: a step against "
                                                  "(γ+1)-token verifies, in each precision")
    add_pair_arguments(profile)
    profile.add_argument("--tokens", default="1,2,4,5,7", help="comma-separated new tokens per forward (1 = a step)")
    profile.add_argument("--context", type=int, default=100, help="tokens already in the cache")
    profile.add_argument("--repeats", type=int, default=12, help="plain timed forwards per token count")

    train = commands.add_parser("train", help="distil the default pair's draft (or train the tiny-code pair)")
    train.add_argument("--recipe", choices=("embedded", "head", "tiny-code"), default="embedded",
                       help="embedded: distil a draft for SmolLM2-135M-Instruct (after --recipe head: it learns "
                            "from the head's teacher passes); head: train the head drafter that reads its hidden "
                            "states; tiny-code: the Python-code pair")
    train.add_argument("--out", default=None,
                       help="output folder (default: assets/smollm2-draft, assets/smollm2-head or assets/tiny-code-pair)")
    train.add_argument("--work-dir", default=None, help="data cache and checkpoints (resumable)")
    train.add_argument("--steps", type=int, default=None, help="embedded: draft optimiser steps")
    train.add_argument("--epochs", type=float, default=None, help="head: passes over the teacher data")
    train.add_argument("--init-from", default=None, metavar="FOLDER",
                       help="head: go on from this trained head (new requests of the target's own only; "
                            "give another --seed)")
    train.add_argument("--lr", type=float, default=None, help="head: peak learning rate")
    train.add_argument("--target-layers", default=None, metavar="I,J,...",
                       help="head: the target's lower layers it reads besides the final one (indices into its "
                            "hidden_states, e.g. 2,15,27; EAGLE-3); 'none' for the final state alone")
    train.add_argument("--minutes", type=float, default=None,
                       help="head: a CPU budget per phase (teacher pass, training); 0 = none")
    train.add_argument("--target-steps", type=int, default=None, help="tiny-code only")
    train.add_argument("--seqkd-steps", type=int, default=None, help="tiny-code only")
    train.add_argument("--distil-steps", type=int, default=None, help="tiny-code only")
    train.add_argument("--seed", type=int, default=None)
    train.add_argument("--threads", type=int, default=None)

    selfcheck = commands.add_parser("selfcheck", help="on a new machine (a GPU): greedy identity in each precision, "
                                                      "then the bench for every drafter")
    add_pair_arguments(selfcheck)
    selfcheck.add_argument("--quick", action="store_true", help="2 prompts, 16 tokens, 1 repeat: seconds, not minutes")

    commands.add_parser("setup", help="convert the default target from the installed wheel now (else on first use)")
    return parser


def parse_numbers(text: str, kind, name: str) -> tuple:
    try:
        values = tuple(kind(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise ValueError(f"--{name} must be comma-separated numbers, got {text!r}") from None
    if not values:
        raise ValueError(f"--{name} is empty")
    return values


def prepare_pair(args):
    import torch

    from specviz.models.loading import load_pair

    if args.threads:
        torch.set_num_threads(args.threads)
    return load_pair(args.pair, args.target, args.draft, device=args.device, precision=args.dtype,
                     int8_drafters=args.int8_drafters)


def terminal_tokens(view, event) -> str:
    """One event of a lane as terminal text: every token coloured by the one display rule."""
    from specviz.decoding.events import PrefillEvent, RoundEvent

    if isinstance(event, PrefillEvent):
        return view.first_text
    if not isinstance(event, RoundEvent):
        return ""
    texts = view.round_texts[event.round_index]
    pieces, own = [], iter(texts.own)
    for shown in event.shown_tokens():
        text = texts.drafted[shown.draft_index] if shown.draft_index is not None else next(own)
        pieces.append(text if shown.kind == "target" else ANSI[shown.kind] + text + ANSI_RESET)
    return "".join(pieces)


def lane_summary(view) -> dict:
    trace = view.trace
    summary = {**trace.summary(), "text": view.text}
    if trace.num_drafted:
        summary["rounds"] = [
            {
                "drafted_ids": [token.token_id for token in event.drafted],
                "rival_ids": [token.token_id for token in event.rivals],
                "num_accepted": event.num_accepted,
                "next_id": event.next_id,
                "next_kind": event.next_kind,
                "emitted_ids": list(event.emitted_ids),
                "draft_s": event.draft_s,
                "verify_s": event.verify_s,
            }
            for event in trace.rounds
        ]
    return summary


def play(view_run, events, decode, quiet: bool) -> None:
    """Feed events into the run view; unless quiet, print each lane as it grows."""
    from specviz.decoding.events import FinishEvent, PrefillEvent
    from specviz.app.render.lanes import lane_title

    legend = " ".join(ANSI[k] + k + ANSI_RESET for k in ("accepted", "rejected", "unexamined", "resample", "bonus"))
    for event in events:
        view_run.add(event, decode)
        if quiet:
            continue
        view = view_run.lane(event.lane)
        if isinstance(event, PrefillEvent):
            key = f"   {legend}" if event.lane == "speculative" else ""
            answer = "\n→ " if view_run.chat else ""  # a chat answer starts on its own line
            print(f"── {lane_title(view_run, event.lane)} ──{key}\n{view_run.prompt_text}{answer}", end="")
        print(terminal_tokens(view, event), end="", flush=True)
        if isinstance(event, FinishEvent):
            print("\n")


def print_figures(view_run) -> None:
    from specviz.app.render.stats import comparison_of, lane_rows, payoff_of

    names = list(view_run.lane_names)
    rows = [
        (label, ["—" if value is None else format(value, spec) for value in values])
        for label, values, spec in lane_rows([view_run.lane(name).trace for name in names], None)
    ]
    width = max(14, *(len(cell) + 2 for _, cells in rows for cell in cells))
    print(f"{'':30}" + "".join(f"{name:>{width}}" for name in names))
    for label, cells in rows:
        print(f"{label:30}" + "".join(f"{cell:>{width}}" for cell in cells))
    comparison = comparison_of(view_run)
    if comparison is not None:
        print(
            f"\nα̂ = {comparison.acceptance_rate:.3f}   c = {comparison.cost_ratio:.3f}   verify cost v = {comparison.verify_cost:.2f}\n"
            f"speedup = {comparison.speedup:.2f}× measured, {comparison.predicted_speedup:.2f}× predicted (Leviathan, v = 1), "
            f"{comparison.predicted_with_verify:.2f}× with the measured v"
        )
        print(payoff_of(view_run, comparison).verdict_text())  # the page's verdict, in the same words


def run_report(view_run, extra_config: dict) -> dict:
    from specviz.app.render.stats import stats_dict

    stats = stats_dict(view_run)
    report = {"config": {**view_run.settings, **extra_config}, "prompt": view_run.prompt_text}
    report.update({name: lane_summary(view_run.lane(name)) for name in view_run.lane_names})
    report.update({key: value for key, value in stats.items() if key not in ("settings", *view_run.lane_names)})
    report["identical_outputs"] = all(stats["identical_tokens"].values()) if stats["identical_tokens"] else None
    return report


def run_generate(args) -> int:
    from dataclasses import asdict

    from specviz.analysis.bench import draft_head_variant
    from specviz.catalogue import run_lanes
    from specviz.decoding.config import DecodeConfig
    from specviz.decoding.engine import decode_lanes
    from specviz.app.render.lanes import RunView

    config = DecodeConfig(
        gamma=DecodeConfig.gamma if args.gamma is None else args.gamma,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        max_new_tokens=args.max_new_tokens,
        seed=args.seed,
        stop_at_eos=not args.ignore_eos,
        full_draft_head=args.full_draft_head,
        drafter=chosen_drafter(args),
        ngram=args.ngram,
        draft_confidence=DecodeConfig.draft_confidence if args.draft_confidence is None else args.draft_confidence,
        rivals=DecodeConfig.rivals if args.rivals is None else args.rivals,
        gamma_schedule=args.gamma_schedule,
        inspect=bool(args.save),  # a saved run keeps the inspector's top-k of p, q and the residual
    )
    config.validate()
    pair = prepare_pair(args)
    prompt_ids = pair.encode(args.prompt, args.chat)
    lanes = run_lanes(("reference",) if args.reference else ())
    settings = {**asdict(config), "pair": pair.name, "chat": pair.uses_chat(args.chat), "precision": pair.precision}
    view_run = RunView(args.prompt, prompt_ids, config.gamma, settings, chat=pair.uses_chat(args.chat), lanes=lanes)
    play(view_run, decode_lanes(pair, prompt_ids, config, lanes), pair.decode, quiet=args.json)
    if args.save:
        view_run.run.save(args.save)
    if args.json:
        extra = {"device": str(pair.device), "draft_head": draft_head_variant(pair, config.full_draft_head)}
        print(json.dumps(run_report(view_run, extra), indent=2))
        return 0
    print_figures(view_run)
    if args.save:
        print(f"\nsaved the run to {args.save}: `python -m specviz replay {args.save}` plays it back")
    return 0


def run_replay(args) -> int:
    from specviz.app.render.lanes import RunView
    from specviz.analysis.run import Run, check_speed, replay

    speed = check_speed(args.speed)
    saved = Run.load(args.file)
    view_run = RunView.replaying(saved)
    events = replay(saved, speed=float("inf") if args.json else speed)
    play(view_run, events, saved.replayed_decode, quiet=args.json)
    if args.json:
        print(json.dumps(run_report(view_run, {"replayed_from": args.file}), indent=2))
        return 0
    print_figures(view_run)
    return 0


def run_bench(args) -> int:
    from dataclasses import asdict

    from specviz.analysis.bench import (BenchConfig, format_hf_table, format_table, load_prompts,
                               results_to_json, run_against_hf)
    from specviz.analysis.bench import run_bench as measure
    from specviz.models.presets import resolve_pair

    config = BenchConfig(
        gammas=parse_numbers(args.gammas, int, "gammas"),
        temperatures=parse_numbers(args.temperature, float, "temperature"),
        repeats=args.repeats,
        max_new_tokens=args.max_new_tokens,
        seed=args.seed,
        top_k=args.top_k,
        top_p=args.top_p,
        stop_at_eos=not args.ignore_eos,
        chat=args.chat,
        full_draft_head=args.full_draft_head,
        drafter=chosen_drafter(args),
        ngram=args.ngram,
        **({} if args.draft_confidence is None else {"draft_confidence": args.draft_confidence}),
        **({} if args.rivals is None else {"rivals": args.rivals}),
        gamma_schedule=args.gamma_schedule,
    )
    if config.repeats < 1:
        raise ValueError("--repeats must be at least 1")
    prompts = load_prompts(args.prompts or resolve_pair(args.pair, args.target, args.draft).prompts_file)
    pair = prepare_pair(args)
    results = measure(pair, prompts, config, progress=not args.json)
    hf_results = run_against_hf(pair, prompts, config, progress=not args.json) if args.against_hf else None
    if args.json:
        report = results_to_json(pair, prompts, config, results)
        if hf_results is not None:
            report["against_hf"] = [asdict(r) for r in hf_results]
        print(json.dumps(report, indent=2))
    else:
        print(
            f"pair {pair.name} on {pair.device} in {pair.precision}{', drafters in int8' if pair.int8_drafters else ''}, "
            f"{len(prompts)} prompts × {config.repeats} repeats, up to "
            f"{config.max_new_tokens} new tokens, {'stop at EOS' if config.stop_at_eos else 'EOS ignored'}; "
            f"drafter: {drafter_description(pair, config)}"
        )
        print(format_table(results))
        if hf_results is not None:
            if drafter_info(config.drafter).hf_equivalent == "prompt_lookup_num_tokens":
                print("\nagainst transformers' generate(prompt_lookup_num_tokens=γ, max_matching_ngram_size=n):")
            else:
                print("\nagainst transformers' generate(assistant_model=draft), whose drafter always runs the full head:")
            print(format_hf_table(hf_results))
    return 0


def drafter_description(pair, config) -> str:
    from specviz.analysis.bench import draft_head_variant

    if config.drafter == "prompt-lookup":
        return f"prompt lookup (n-grams up to {config.ngram})"
    if drafter_info(config.drafter).reads_target:
        return f"{drafter_info(config.drafter).label}, {len(pair.head_rows)} of {pair.vocab_size} output rows"
    return f"draft model, {draft_head_variant(pair, config.full_draft_head)}"


def chosen_drafter(args) -> str:
    """--drafter, or the pair's own (PairPreset.unnamed_drafter)."""
    from specviz.models.presets import resolve_pair

    return args.drafter or resolve_pair(args.pair, args.target, args.draft).unnamed_drafter()


def run_profile(args) -> int:
    import torch

    from dataclasses import replace

    from specviz.analysis.profile import ProfileConfig, format_profile, profile_target
    from specviz.models.invariance import plain_copy
    from specviz.models.precision import PRECISIONS

    config = ProfileConfig(token_counts=parse_numbers(args.tokens, int, "tokens"), context_length=args.context,
                           repeats=args.repeats)
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


def layers_from(text: str | None) -> tuple[int, ...] | None:
    """--target-layers: '2,15,27' → (2, 15, 27); 'none' → (); not given → None (the recipe's default)."""
    if text is None:
        return None
    return () if text.strip().lower() == "none" else tuple(int(part) for part in text.split(","))


def run_train(args) -> int:
    from dataclasses import replace

    if args.recipe == "head":
        from specviz.training.head_config import HeadTrainConfig
        from specviz.training.head_train import train_head_recipe

        minutes = {"teacher_minutes": args.minutes, "train_minutes": args.minutes} if args.minutes is not None else {}
        overrides = {"out_dir": args.out, "work_dir": args.work_dir, "epochs": args.epochs, "seed": args.seed,
                     "num_threads": args.threads, "init_from": args.init_from, "lr": args.lr, **minutes,
                     "target_layers": layers_from(args.target_layers)}
        train_head_recipe(replace(HeadTrainConfig(), **{k: v for k, v in overrides.items() if v is not None}))
        return 0
    if args.recipe == "embedded":
        from specviz.training.distil import DistilConfig, distil

        overrides = {"out_dir": args.out, "work_dir": args.work_dir, "steps": args.steps, "seed": args.seed, "num_threads": args.threads}
        distil(replace(DistilConfig(), **{k: v for k, v in overrides.items() if v is not None}))
        return 0

    from specviz.training.train import TrainConfig, train

    overrides = {
        "out_dir": args.out,
        "work_dir": args.work_dir,
        "target_steps": args.target_steps,
        "seqkd_steps": args.seqkd_steps,
        "distil_steps": args.distil_steps,
        "seed": args.seed,
        "num_threads": args.threads,
    }
    config = replace(TrainConfig(), **{k: v for k, v in overrides.items() if v is not None})
    train(config)
    return 0


def run_selfcheck(args) -> int:
    import torch

    from specviz.analysis.bench import load_prompts
    from specviz.models.presets import resolve_pair
    from specviz.analysis.selfcheck import SelfCheckConfig, run_selfcheck

    if args.threads:
        torch.set_num_threads(args.threads)
    quick = dict(num_prompts=2, max_new_tokens=16, bench_repeats=1, bench_gammas=(3,)) if args.quick else {}
    precisions = {"precisions": (args.dtype,)} if args.dtype else {}
    config = SelfCheckConfig(pair=args.pair, device=args.device, **quick, **precisions)
    exact = run_selfcheck(load_prompts(resolve_pair(args.pair).prompts_file), config)
    return 0 if exact else 1


def run_setup(args) -> int:
    from specviz.models.convert import default_target_id

    print(f"default target ready: {default_target_id()}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from specviz.models.convert import TargetUnavailableError
    from specviz.models.errors import IncompatiblePairError, ModelLoadError

    handlers = {"generate": run_generate, "replay": run_replay, "bench": run_bench, "profile": run_profile, "train": run_train, "setup": run_setup,
                "selfcheck": run_selfcheck}
    try:
        return handlers[args.command](args)
    except (ValueError, ModelLoadError, IncompatiblePairError, FileNotFoundError, TargetUnavailableError) as error:
        print(f"specviz: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("specviz: stopped", file=sys.stderr)
        return 130
