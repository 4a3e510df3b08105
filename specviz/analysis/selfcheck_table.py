"""The self-check's short table (specviz.analysis.selfcheck): what a reader of the command's last lines
needs, from the run's own checks and records: exactness per precision, the target alone against
transformers' generate(), each record's best γ per temperature, the profile's line, each phase's time."""

from __future__ import annotations

from collections import Counter


def best_rows(records: dict[str, dict]) -> list[str]:
    """Per record and temperature, the cell with the best median speedup."""
    lines = [f"{'record':<52} {'T':>3} {'γ':>2} {'speedup (min–max)':>19} {'α̂':>5} {'c':>5} {'v':>5} "
             f"{'target tok/s':>12} {'parted':>6}"]
    for name, record in records.items():
        for temperature in sorted({r["temperature"] for r in record["results"]}):
            cells = [r for r in record["results"] if r["temperature"] == temperature]
            r = max(cells, key=lambda cell: cell["median_speedup"])
            parted = "—" if r["num_diverged"] is None else f"{r['num_diverged']}/{r['num_runs']}"
            spread = f"{r['median_speedup']:.2f}× ({r['min_speedup']:.2f}–{r['max_speedup']:.2f})"
            lines.append(f"{name.removesuffix('.json'):<52} {temperature:>3g} {r['gamma']:>2} {spread:>19} "
                         f"{r['acceptance_rate']:>5.2f} {r['c']:>5.3f} {r['verify_cost']:>5.2f} "
                         f"{r['median_baseline_tokens_per_s']:>12.1f} {parted:>6}")
    return lines


def exactness_row(result: dict) -> str:
    invariance = result["invariance"] or {}
    verify = (f"bitwise ({invariance.get('attention')})" if invariance.get("bitwise")
              else f"not bitwise (|Δ| ≤ {invariance.get('max_difference', float('nan')):.1g})")
    done = ", ".join(f"{name} {result['prompts_done'][name]}/{total}" for name, total in result["prompts_total"].items())
    row = (f"{result['precision']:<9} {verify:<28} {result['num_identical']:>4}/{result['num_checked']:<4} "
           f"{done}{'  (cut)' if result['cut'] else ''}")
    against = Counter(parting["against"] for parting in result["partings"])
    if against:  # which reference each parting was from: the target alone (a broken promise) or generate()
        row += "; parted: " + ", ".join(f"{count} from the {name}" if name == "target alone" else f"{count} from {name}"
                                        for name, count in sorted(against.items()))
    return row


def generate_line(result: dict | None) -> str:
    if not result or not result["ours_over_generate"]:
        return "target alone vs transformers' generate(): not measured"
    spread, plain = result["ours_over_generate"], result.get("ours_over_plain_generate") or {}
    line = (f"target alone vs transformers' generate() ({result['precision']}, greedy, whole calls): "
            f"{spread['median']:.2f}× ({spread['min']:.2f}–{spread['max']:.2f}) on the same target")
    if plain:
        line += f", {plain['median']:.2f}× ({plain['min']:.2f}–{plain['max']:.2f}) on the target as transformers loads it"
    return line + f" over {result['num_prompts']} prompts{' (cut)' if result['cut'] else ''}"


def format_table(header: str, checks: dict, records: dict[str, dict], profile_line: str, phases: list[dict]) -> str:
    lines = [header, "", f"{'precision':<9} {'verify vs steps':<28} {'identical':>9} prompts (examples, held-out)"]
    lines += [exactness_row(result) for result in checks["exactness"]] + [generate_line(checks["baseline_vs_generate"])]
    lines += ["", "bench, best γ per record and temperature (1 repeat; records.json has every cell):", *best_rows(records)]
    lines += ["", f"profile: {profile_line or 'not run'}", "phases: " + "; ".join(
        f"{p['phase']} {p.get('used_s', '?')}/{p['budget_s']} s{' CUT' if p['cut'] else ''}" for p in phases)]
    return "\n".join(lines) + "\n"
