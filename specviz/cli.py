"""python -m specviz generate | bench | train"""

from __future__ import annotations

import argparse
import json
import os
import sys

from specviz.palette import ANSI, ANSI_RESET

# The CLI never needs the network for the offline pairs; keep libraries from phoning home.
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")


def add_pair_arguments(parser: argparse.ArgumentParser) -> None:
    from specviz.models import DEFAULT_PRESET, PRESETS

    parser.add_argument("--pair", default=None, help=f"preset: {', '.join(PRESETS)} (default {DEFAULT_PRESET})")
    parser.add_argument("--target", default=None, help="target model: hub id or local folder (with --draft)")
    parser.add_argument("--draft", default=None, help="draft model: hub id or local folder (with --target)")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when present)")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (1 gives the steadiest timings)")


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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m specviz", description="Speculative decoding, visualised.")
    commands = parser.add_subparsers(dest="command", required=True)

    generate = commands.add_parser("generate", help="run the baseline and speculative lanes on one prompt")
    generate.add_argument("--prompt", required=True)
    add_pair_arguments(generate)
    generate.add_argument("--gamma", type=int, default=4, help="tokens drafted per round (γ)")
    generate.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    add_sampling_arguments(generate)
    generate.add_argument("--max-new-tokens", type=int, default=64)
    generate.add_argument("--ignore-eos", action="store_true", help="keep going past end-of-sequence")
    generate.add_argument("--json", action="store_true", help="print one JSON object instead of text")

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

    train = commands.add_parser("train", help="distil the default pair's draft (or train the tiny-code pair)")
    train.add_argument("--recipe", choices=("embedded", "tiny-code"), default="embedded",
                       help="embedded: distil a draft for SmolLM2-135M-Instruct; tiny-code: the Python-code pair")
    train.add_argument("--out", default=None, help="output folder (default: assets/smollm2-draft or assets/tiny-code-pair)")
    train.add_argument("--work-dir", default=None, help="data cache and checkpoints (resumable)")
    train.add_argument("--steps", type=int, default=None, help="embedded: draft optimiser steps")
    train.add_argument("--target-steps", type=int, default=None, help="tiny-code only")
    train.add_argument("--seqkd-steps", type=int, default=None, help="tiny-code only")
    train.add_argument("--distil-steps", type=int, default=None, help="tiny-code only")
    train.add_argument("--seed", type=int, default=None)
    train.add_argument("--threads", type=int, default=None)

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

    from specviz.models import load_pair

    if args.threads:
        torch.set_num_threads(args.threads)
    return load_pair(args.pair, args.target, args.draft, device=args.device)


def colour_speculative(pair, trace) -> str:
    """The speculative lane as terminal text: every drafted token coloured by its verdict."""
    pieces = [pair.decode([trace.prefill.next_id])] if trace.prefill else []
    for event in trace.rounds:
        for index, token in enumerate(event.drafted):
            pieces.append(ANSI[event.verdict(index)] + pair.decode([token.token_id]) + ANSI_RESET)
        if len(event.emitted_ids) > event.num_accepted:  # the target's token survived any EOS cut
            pieces.append(ANSI[event.next_kind] + pair.decode([event.next_id]) + ANSI_RESET)
    return "".join(pieces)


def lane_summary(pair, trace, speculative: bool) -> dict:
    summary = {**trace.summary(), "text": pair.decode(trace.token_ids)}
    if speculative:
        summary["rounds"] = [
            {
                "drafted_ids": [token.token_id for token in event.drafted],
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


def run_generate(args) -> int:
    from dataclasses import asdict

    from specviz.bench import draft_head_variant
    from specviz.engine import DecodeConfig, decode_both
    from specviz.trace import Trace, compare

    config = DecodeConfig(
        gamma=args.gamma,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        max_new_tokens=args.max_new_tokens,
        seed=args.seed,
        stop_at_eos=not args.ignore_eos,
        full_draft_head=args.full_draft_head,
    )
    config.validate()
    pair = prepare_pair(args)
    prompt_ids = pair.encode(args.prompt, args.chat)
    traces = {"baseline": Trace(), "speculative": Trace()}
    for event in decode_both(pair, prompt_ids, config):
        traces[event.lane].add(event)
    baseline, speculative = traces["baseline"], traces["speculative"]
    comparison = compare(baseline, speculative, config.gamma)
    if args.json:
        print(
            json.dumps(
                {
                    "config": {
                        **asdict(config), "pair": pair.name, "device": str(pair.device), "chat": pair.uses_chat(args.chat),
                        "draft_head": draft_head_variant(pair, config.full_draft_head),
                    },
                    "prompt": args.prompt,
                    "baseline": lane_summary(pair, baseline, speculative=False),
                    "speculative": lane_summary(pair, speculative, speculative=True),
                    "speedup": comparison.speedup,
                    "cost_ratio": comparison.cost_ratio,
                    "predicted_speedup": comparison.predicted_speedup,
                    "best_gamma": comparison.best_gamma,
                    "identical_outputs": baseline.token_ids == speculative.token_ids,
                },
                indent=2,
            )
        )
        return 0
    legend = " ".join(ANSI[k] + k + ANSI_RESET for k in ("accepted", "rejected", "unexamined", "resample", "bonus"))
    print(f"── baseline (target alone) ──\n{args.prompt}{pair.decode(baseline.token_ids)}\n")
    print(f"── speculative (γ={config.gamma}) ── {legend}\n{args.prompt}{colour_speculative(pair, speculative)}\n")
    rows = [
        ("tokens", baseline.num_tokens, speculative.num_tokens),
        ("wall time (model work)", f"{baseline.wall_s:.3f} s", f"{speculative.wall_s:.3f} s"),
        ("tokens/s", f"{baseline.tokens_per_s:.1f}", f"{speculative.tokens_per_s:.1f}"),
        ("target forward passes", baseline.num_target_forwards, speculative.num_target_forwards),
        ("draft forward passes", 0, speculative.num_draft_forwards),
    ]
    print(f"{'':24}{'baseline':>14}{'speculative':>14}")
    for name, base_value, spec_value in rows:
        print(f"{name:24}{base_value!s:>14}{spec_value!s:>14}")
    print(
        f"\nα̂ = {comparison.acceptance_rate:.3f}   mean tokens per round = {speculative.mean_tokens_per_round:.2f}   "
        f"c = {comparison.cost_ratio:.3f}\nspeedup = {comparison.speedup:.2f}× measured, "
        f"{comparison.predicted_speedup:.2f}× predicted (Leviathan)   recommended γ = {comparison.best_gamma}"
    )
    return 0


def run_bench(args) -> int:
    from dataclasses import asdict

    from specviz.bench import (BenchConfig, draft_head_variant, format_hf_table, format_table, load_prompts,
                               results_to_json, run_against_hf)
    from specviz.bench import run_bench as measure
    from specviz.models import resolve_pair

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
            f"pair {pair.name} on {pair.device}, {len(prompts)} prompts × {config.repeats} repeats, up to "
            f"{config.max_new_tokens} new tokens, {'stop at EOS' if config.stop_at_eos else 'EOS ignored'}; "
            f"drafter: {draft_head_variant(pair, config.full_draft_head)}"
        )
        print(format_table(results))
        if hf_results is not None:
            print("\nagainst transformers' generate(assistant_model=draft), whose drafter always runs the full head:")
            print(format_hf_table(hf_results))
    return 0


def run_train(args) -> int:
    from dataclasses import replace

    if args.recipe == "embedded":
        from specviz.distil import DistilConfig, distil

        overrides = {"out_dir": args.out, "work_dir": args.work_dir, "steps": args.steps, "seed": args.seed, "num_threads": args.threads}
        distil(replace(DistilConfig(), **{k: v for k, v in overrides.items() if v is not None}))
        return 0

    from specviz.train import TrainConfig, train

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


def run_setup(args) -> int:
    from specviz.convert import default_target_id

    print(f"default target ready: {default_target_id()}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from specviz.convert import TargetUnavailableError
    from specviz.models import IncompatiblePairError, ModelLoadError

    handlers = {"generate": run_generate, "bench": run_bench, "train": run_train, "setup": run_setup}
    try:
        return handlers[args.command](args)
    except (ValueError, ModelLoadError, IncompatiblePairError, FileNotFoundError, TargetUnavailableError) as error:
        print(f"specviz: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("specviz: stopped", file=sys.stderr)
        return 130
