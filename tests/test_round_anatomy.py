"""One round drawn (specviz.app.plots_round), on real runs of the tiny-code pair: chains (with and without
rival guesses, greedy and sampled) and trees. The drawing must sit on the lane's clock of "Where the time
went", draw the one verify as one block after the drafts with its rows stacked (computed together), light the
kept ones, cut after the first rejection, say how many rows the caches drop and what its words mean; the inspector
and step mode show it."""

from __future__ import annotations

import pytest

from specviz.analysis.bench import load_prompts
from specviz.analysis.trace import lane_blocks
from specviz.app import plots_round, render
from specviz.app.plots_round import cut_index, target_cells
from specviz.app.render import rule
from specviz.decoding.config import DecodeConfig
from specviz.decoding.engine import speculative_decode
from specviz.models.loading import load_pair
from specviz.models.presets import PRESETS

SETUPS = {  # name → the run's settings beyond γ 4 and the draft model
    "chain greedy": {"rivals": 0},
    "chain sampled": {"temperature": 1.0},
    "rivals": {"rivals": 2, "draft_confidence": 0.5},
    "tree greedy": {"tree": 8},
    "tree sampled": {"tree": 8, "temperature": 1.0},
}


@pytest.fixture(scope="module")
def runs() -> dict[str, render.RunView]:
    pair = load_pair("tiny-code")
    prompt = load_prompts(PRESETS["tiny-code"].prompts_file)[0]
    prompt_ids = pair.encode(prompt.text, False)
    views = {}
    for name, settings in SETUPS.items():
        config = DecodeConfig(gamma=4, max_new_tokens=40, drafter="model", seed=0, inspect=True, **settings)
        view = render.RunView(prompt.text, prompt_ids, config.gamma, settings)
        for event in speculative_decode(pair, prompt_ids, config):
            view.add(event, pair.decode)
        views[name] = view
    return views


def drafted_rounds(view: render.RunView):
    rounds = [event for event in view.speculative.trace.rounds if event.gamma]
    assert rounds, "no round drafted: the test checks nothing"
    return rounds


@pytest.mark.parametrize("setup", SETUPS)
def test_the_verify_is_split_into_the_rows_it_computed_and_the_cut_follows_the_first_rejection(runs, setup):
    view = runs[setup]
    lane = view.speculative
    seen_cut = seen_bonus = False
    for event in drafted_rounds(view):
        texts = lane.round_texts[event.round_index]
        cells = target_cells(event, texts, lane.greedy)
        rows = len(event.nodes) if event.is_tree else event.gamma + len(event.guesses[1:]) + 1
        assert len(cells) == rows == event.num_verify_rows  # the committed token's row, one per drafted token or node
        kept = [cell for cell in cells if cell.kind == "accepted"]
        assert len(kept) == event.num_kept_drafts
        cut = cut_index(event, cells)
        if event.is_tree:
            assert cut is None and cells[-1].kind == ("bonus" if event.next_kind == "bonus" else "resample")
        elif event.next_kind == "resample":
            assert cut is not None and cells[cut].kind == "rejected" and not event.drafted[event.num_accepted].accepted
            assert all(cell.kind != "accepted" for cell in cells[cut + 1:])  # nothing after the cut is kept
            # its hover, the rule's: the rejected draft, and the target's own token the same row gives
            rejected, own = plots_round.text_at(texts.drafted, event.num_accepted), plots_round.text_at(texts.own, 0)
            assert cells[cut].hover == rule.draft_row_reason(event.num_accepted + 1, rejected, "rejected", lane.greedy,
                                                             own)
            seen_cut = True
        else:
            assert cut is None and cells[-1].kind == "bonus"
            assert cells[-1].hover == rule.last_row_reason(plots_round.text_at(texts.own, len(texts.own) - 1))
            seen_bonus = True
        assert event.num_dropped_rows == rows - 1 - event.num_kept_drafts
    if not event.is_tree:
        assert seen_bonus or seen_cut


@pytest.mark.parametrize("setup", SETUPS)
def test_the_drawing_sits_on_the_lanes_clock_as_where_the_time_went(runs, setup):
    view = runs[setup]
    lane = view.speculative
    blocks = lane_blocks(lane.trace)
    rounds = view.speculative.trace.rounds
    for event in [*drafted_rounds(view)[:4], rounds[-1]]:  # the last may have drafted nothing: one plain step
        figure = plots_round.round_anatomy(lane.trace, event, lane.round_texts[event.round_index], lane.greedy)
        drafts = [block for block in blocks if block.round_index == event.round_index and block.is_draft]
        draft_bars, row_bars = drawn_bars(figure)
        assert len(draft_bars) == event.num_draft_forwards == len(drafts)
        assert [bar[0] for bar in draft_bars] == pytest.approx([block.start_s for block in drafts])
        cells = target_cells(event, lane.round_texts[event.round_index], lane.greedy)
        assert len(row_bars) == len(cells)
        title = figure.layout.title.text
        assert title.startswith(f"Round {event.round_index + 1}:") and f"over {len(cells)} row" in title
        assert f"the caches drop {event.num_dropped_rows} row" in title


def drawn_bars(figure) -> tuple[list, list]:
    """The drawing's bars as (start, duration, line): the draft forwards', then the verify's rows'."""
    bars = [(bar.base[0], bar.x[0], bar.y[0]) for bar in figure.data]
    return ([bar for bar in bars if bar[2] == plots_round.DRAFT_ROW],
            [bar for bar in bars if bar[2] != plots_round.DRAFT_ROW])


@pytest.mark.parametrize("setup", SETUPS)
def test_the_verify_is_one_forward_after_the_drafts_its_rows_stacked_and_computed_together(runs, setup):
    """One target forward computes every row at once: each row is drawn from the forward's start to its end, on
    a line of its own, and the forward starts when the last draft forward has ended; each row keeps its name
    beside it however narrow the block (a block too narrow hid the name drawn inside it)."""
    lane = runs[setup].speculative
    blocks = lane_blocks(lane.trace)
    for event in drafted_rounds(runs[setup]):
        texts = lane.round_texts[event.round_index]
        verify = [block for block in blocks if block.round_index == event.round_index][-1]
        draft_bars, row_bars = drawn_bars(plots_round.round_anatomy(lane.trace, event, texts, lane.greedy))
        assert len(row_bars) == event.num_verify_rows > 1
        assert all(start == pytest.approx(verify.start_s) for start, _, _ in row_bars)
        assert all(start + width == pytest.approx(verify.start_s + verify.duration_s) for start, width, _ in row_bars)
        assert len({line for _, _, line in row_bars}) == len(row_bars)  # stacked: a line each
        if draft_bars:
            assert verify.start_s >= max(start + width for start, width, _ in draft_bars) - 1e-9
    figure = plots_round.round_anatomy(lane.trace, event, texts, lane.greedy)
    cells = target_cells(event, texts, lane.greedy)
    assert list(figure.layout.yaxis.ticktext)[1:] == [plots_round.short_label(cell.text) for cell in cells]


@pytest.mark.parametrize("setup", SETUPS)
def test_the_words_the_drawing_uses_are_said_under_it(runs, setup):
    """A row, the rows the caches drop and an unused row, each explained where the drawing uses them."""
    lane = runs[setup].speculative
    said_dropped = said_unused = False
    for event in drafted_rounds(runs[setup]):
        texts = lane.round_texts[event.round_index]
        figure = plots_round.round_anatomy(lane.trace, event, texts, lane.greedy)
        words = " ".join(" ".join(note.text.split("<br>")) for note in figure.layout.annotations)
        assert plots_round.ROW_WORDS in words
        assert (plots_round.DROPPED_WORDS in words) == (event.num_dropped_rows > 0)
        unused = any(cell.text == plots_round.UNUSED for cell in target_cells(event, texts, lane.greedy))
        assert (plots_round.UNUSED_WORDS in words) == unused
        said_dropped, said_unused = said_dropped or event.num_dropped_rows > 0, said_unused or unused
        guessing = plots_round.round_anatomy(lane.trace, event, texts, lane.greedy, reveal=False)
        assert {note.text for note in guessing.layout.annotations} >= {plots_round.ONE_PASS_TEXT}
        assert plots_round.DROPPED_WORDS not in " ".join(" ".join(note.text.split("<br>")) for note in guessing.layout.annotations)
    assert said_dropped


def test_the_inspector_and_step_mode_draw_the_round(runs):
    from specviz.app.inspector.page import inspector_values

    view = runs["chain greedy"]
    event = drafted_rounds(view)[0]
    _, _, drawn = inspector_values(view, event.round_index)
    assert drawn.layout.title.text.startswith(f"Round {event.round_index + 1}:") and len(drawn.data) > 1
    _, _, empty = inspector_values(None, None)
    assert not empty.data


@pytest.mark.parametrize("setup", ["chain greedy", "chain sampled", "rivals"])
def test_step_modes_captions_say_what_the_drawing_draws(runs, setup):
    """Step mode gives each stage of a chain round in one line (its paragraph a click away): the rows of the
    verify, each draft's verdict and the rows dropped are the drawing's own figures."""
    from specviz.app.step_mode.words import chain_captions, stages_html

    view = runs[setup]
    lane = view.speculative
    for event in drafted_rounds(view):
        texts = lane.round_texts[event.round_index]
        captions = chain_captions(event, texts)
        assert f"over {event.num_verify_rows} rows" in captions["verify"]
        assert f"the caches drop {event.num_dropped_rows} row" in captions["rollback"]
        assert f"{event.num_accepted} of {event.gamma} draft" in captions["verdict"]
        verdicts = [event.verdict(index) for index in range(event.gamma)]
        for kind in ("accepted", "rejected", "unexamined"):  # each draft drawn with its verdict, as in the lane
            assert captions["accept"].count(f"tok tok-{kind}") == verdicts.count(kind)
    html = stages_html([("verify", "Verify", "the paragraph", "the caption")], "Round 1")
    assert "<summary><b>1 · Verify.</b> the caption</summary>" in html and "the paragraph" in html


@pytest.mark.parametrize("setup", SETUPS)
def test_every_round_is_one_tree_of_nodes_whose_kept_path_is_the_text(runs, setup):
    """RoundEvent.nodes, the one shape of every round: a chain a linear tree, rival guesses a one-level tree, a
    tree as drafted; the accepted nodes are one path from the text, the emitted tokens, with the target's own below."""
    shapes = set()
    for event in drafted_rounds(runs[setup]):
        nodes, shapes = event.nodes, shapes | {event.shape}
        for node in nodes:
            assert node.parent < nodes.index(node) and node.depth == (1 if node.parent == -1 else nodes[node.parent].depth + 1)
            if node.verdict in ("accepted", "rejected"):  # judged: with the figures it was judged by
                assert None not in (node.target_prob, node.accept_prob)
                assert (node.r is None) == runs[setup].speculative.greedy  # at temperature 0 no coin is drawn
            elif node.verdict in ("resample", "bonus"):
                assert node.r is None and node.draft_prob == 0
        path = [i for i, node in enumerate(nodes) if node.verdict == "accepted"]
        assert [nodes[i].parent for i in path] == [-1, *path][:len(path)]  # one path down from the last committed token
        own = [node for node in nodes if node.verdict in ("resample", "bonus")]
        assert [nodes[i].token_id for i in path] + [node.token_id for node in own] == list(event.emitted_ids)
        assert all(node.parent == (path[-1] if path else -1) for node in own)
        drafted = [node for node in nodes if node not in own]
        assert len(drafted) == (len(event.nodes) - len(own) if event.is_tree else event.gamma + len(event.guesses[1:]))
    shape = setup.split()[0]  # a rival run drafts a plain chain where its first draft was sure
    assert shape in shapes <= {shape, "chain"}
