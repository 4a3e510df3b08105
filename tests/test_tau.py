"""τ, tokens per target pass, beside α̂: one count, read the same way by the page's
table, its gap sentence, the explainer, the bench and the sweep (hand-made events, milliseconds)."""

from __future__ import annotations

import re

from specviz.analysis.bench import format_table, summarise
from specviz.app import render
from specviz.app.render.stats import comparison_of, gap_text, lanes_table
from specviz.app.render.tau import tau_text
from tests.test_render import make_run


def table_row(html: str, label: str) -> list[str]:
    row = html.split(label, 1)[1].split("</tr>", 1)[0]
    return re.findall(r">([^<>]+)</td>", row)


def test_the_table_the_gap_sentence_and_the_bench_count_tau_the_same_way():
    run = make_run()  # speculative: prefill's token, then rounds of 2 and 4 tokens, one target forward each
    baseline, speculative = run.baseline.trace, run.speculative.trace
    # the prefill's forward (the prompt, and the first token in every lane alike) is not a round: 6 / 2, not 7 / 3
    assert speculative.tokens_per_target_forward == 3.0 and baseline.tokens_per_target_forward == 1.0
    assert table_row(lanes_table(run), "tokens per target pass τ") == ["1.00", "3.00"]
    assert "The rounds made τ = 3.00 tokens each" in gap_text(run, comparison_of(run))
    cell = summarise(3, 1.0, [(baseline, speculative)])
    assert cell.tokens_per_target_forward == 3.0
    assert "3.00" in format_table([cell]).splitlines()[2] and "τ: tokens per target pass" in format_table([cell])
    assert render.stats_dict(run)["speculative"]["tokens_per_target_forward"] == 3.0


def test_one_sentence_in_the_runs_numbers_tells_tau_from_alpha():
    run = make_run()
    text = tau_text(run.speculative.trace, run.gamma, run.baseline.trace)
    # α̂: 1 of 2 examined in the first round, 3 of 3 in the second → 4 of 5
    assert text.startswith("Tokens per target pass τ = 3.00: after the prefill the target ran 2 forwards and they gave 6 tokens")
    assert "α̂ = 0.80 counts something else: of the 5 drafts the target examined it accepted 4" in text
    assert "at most γ + 1 = 4" in text
    assert "class=\"tau\"" in render.stats_html(run) and "τ = 3.00" in render.explain_html(run)
