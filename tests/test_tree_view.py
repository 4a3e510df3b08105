"""A tree round as the page shows it, on real tree runs of the tiny-code pair (tree 8):
the figure's layout (parents above children, the kept path marked, unexamined nodes grey), the mask it
draws against the engine's own, each node's plain line, the inspector and the lane's mark."""

from __future__ import annotations

import os
import re

import pytest
import torch

from specviz.analysis.bench import load_prompts
from specviz.app import plots_tree, render
import specviz.app.render.tree_round  # noqa: F401  (render.tree_round in the tests below)
from specviz.app.palette import COLORS
from specviz.app.render import rule
from specviz.app.render.tokens import escape_text, prob, quoted
from specviz.app.render.tree_round import after_text, figure_words, node_lines, num_branches, tried_before
from specviz.app.wording import as_sentence
from specviz.decoding.config import DecodeConfig
from specviz.decoding.engine import speculative_decode
from specviz.decoding.forward import tree_layout
from specviz.models.loading import load_pair
from specviz.models.presets import PRESETS


def tree_run(pair, temperature: float) -> render.RunView:
    """A tree-8 run of the pair's first example prompt, as the page keeps it."""
    prompt = load_prompts(PRESETS["tiny-code"].prompts_file)[0]
    prompt_ids = pair.encode(prompt.text, False)
    config = DecodeConfig(gamma=4, tree=8, max_new_tokens=40, temperature=temperature, drafter="model", seed=0)
    run = render.RunView(prompt.text, prompt_ids, config.gamma, {"temperature": temperature, "tree": 8})
    for event in speculative_decode(pair, prompt_ids, config):
        run.add(event, pair.decode)
    return run


@pytest.fixture(scope="module")
def runs() -> dict[float, render.RunView]:
    pair = load_pair("tiny-code")
    return {temperature: tree_run(pair, temperature) for temperature in (0.0, 1.0)}


def tree_rounds(run: render.RunView):
    rounds = [event for event in run.speculative.trace.rounds if event.is_tree]
    assert rounds, "no tree round: the test checks nothing"
    return rounds


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_the_layout_puts_each_parent_above_its_children_and_marks_the_kept_path(runs, temperature):
    for event in tree_rounds(runs[temperature]):
        placed = plots_tree.lay_out_tree(event.nodes)
        at = {entry.index: entry for entry in placed}
        assert placed[0].index == plots_tree.ROOT and placed[0].y == 0
        children = plots_tree.children_in_order(event.nodes)
        for entry in placed[1:]:
            assert entry.y == at[entry.parent].y - 1  # one row below its parent
            below = [at[child].x for child in children[entry.index]]
            if below:  # a parent sits over its children, which never share a place
                assert min(below) <= entry.x <= max(below) and len(set(below)) == len(below)
        leaves = [entry.x for entry in placed if not children[entry.index]]
        assert len(set(leaves)) == len(leaves)
        # The kept path: the root, the accepted nodes, one per depth and each the child of the one before,
        # then the target's own token; drawn in the accepted colour (its own token in its kind's colour).
        path = [entry for entry in placed[1:] if entry.on_path]
        assert [entry.parent for entry in path] == [plots_tree.ROOT] + [entry.index for entry in path[:-1]]
        assert all(entry.kind == "accepted" and entry.color == COLORS["accepted"] for entry in path[:-1])
        assert path[-1].kind in ("resample", "bonus") and path[-1].color == COLORS[path[-1].kind]
        for entry in placed[1:]:  # grey below a node the walk did not keep, and never on the path
            if entry.parent != plots_tree.ROOT and at[entry.parent].kind in ("rejected", "unexamined"):
                assert entry.kind == "unexamined" and entry.color == COLORS["unexamined"] and not entry.on_path
    kinds = {entry.kind for event in tree_rounds(runs[temperature]) for entry in plots_tree.lay_out_tree(event.nodes)}
    assert {"accepted", "unexamined"} <= kinds


def test_the_drawn_mask_is_the_mask_the_target_saw(runs):
    """sees_matrix against forward.tree_layout's 4D mask for each real tree (rows: nodes; text, then nodes)."""
    for event in tree_rounds(runs[0.0]):
        parents = [node.parent for node in event.nodes[:-1]]
        num_text = 5  # any text length: the text columns are all seen, and drawn as one
        layout = tree_layout(num_text + len(parents), len(parents), parents, torch.device("cpu"), torch.float32)
        engine_sees = (layout["attention_mask"][0, 0] == 0).tolist()  # (N, text + N)
        drawn = plots_tree.sees_matrix(parents)
        assert [row[num_text - 1:] for row in engine_sees] == drawn
        assert all(row[:num_text] == [True] * num_text for row in engine_sees)
    assert any(not all(row) for row in drawn)  # a tree, not a chain: some node does not see another


def test_each_node_says_why_in_plain_words(runs):
    """T = 0: a rejected node names the target's own pick there; T > 0: p′(x) and the coin r; an unexamined
    node says why the walk never came; the target's own token says where it came from."""
    # a node the walk never tried: the three reasons it can have, all opening alike
    unexamined = os.path.commonprefix([rule.tree_unexamined_reason("X", rejected, "Y", is_branch)
                                       for rejected in (True, False) for is_branch in (True, False)])
    seen = set()
    for temperature, run in runs.items():
        for event in tree_rounds(run):
            texts = run.speculative.round_texts[event.round_index].nodes
            assert len(texts) == len(event.nodes)
            lines = node_lines(event, texts, greedy=temperature == 0)
            for i, node in enumerate(event.nodes):
                why = lines[i].split("\n")[-1]
                tried = ", ".join(quoted(texts[j]) for j in tried_before(event.nodes, i))
                if node.verdict == "rejected" and temperature == 0:
                    assert why == greedy_rejected_line(event, i, texts), why
                elif node.verdict == "rejected":
                    assert why == rule.tree_rejected_reason(False, chance=prob(node.accept_prob), p=prob(node.target_prob),
                                                            r=f"{node.r:.3f}", earlier=tried), why
                    assert rule.coin_text(f"{node.r:.3f}", accepted=False) in why  # the coin, named
                elif node.verdict == "unexamined":
                    assert why.startswith(unexamined) and len(unexamined) > 10, why
                elif node.verdict == "resample":
                    assert why == rule.tree_own_reason(False, after_text(event.nodes, i, texts), tried or "none",
                                                       greedy=temperature == 0), why
                seen.add((temperature, node.verdict))
    assert {(0.0, "rejected"), (0.0, "unexamined"), (1.0, "rejected"), (1.0, "resample")} <= seen, seen


def greedy_rejected_line(event, index: int, texts) -> str:
    """What the rule says of a guess rejected at temperature 0: the target's own pick there, which the walk took."""
    node = event.nodes[index]
    pick = next(j for j, other in enumerate(event.nodes) if other.parent == node.parent
                and other.verdict in ("accepted", "resample", "bonus"))
    return rule.tree_rejected_reason(True, pick=quoted(texts[pick]), guess=quoted(texts[index]),
                                     share=f"{node.draft_prob:.0%}")


def test_the_inspector_draws_the_tree_and_its_mask_and_the_lane_marks_tree_rounds(runs):
    from specviz.app.inspector.page import inspector_values

    run = runs[0.0]
    event = next(event for event in tree_rounds(run) if any(node.verdict == "rejected" for node in event.nodes))
    html, figure, _ = inspector_values(run, event.round_index)
    assert "tree-table" in html and html.count('class="inspect-row tree-row') == len(event.nodes)
    texts = run.speculative.round_texts[event.round_index].nodes
    said = [greedy_rejected_line(event, i, texts) for i, node in enumerate(event.nodes) if node.verdict == "rejected"]
    assert all(escape_text(line) in html for line in said)
    by_name = {trace.name: trace for trace in figure.data if trace.name}
    rejected = by_name[plots_tree.KIND_NAMES["rejected"]]
    assert sorted(text.split("<br>")[-1] for text in rejected.hovertext) == sorted(plots_tree.plotly_text(line)
                                                                                   for line in said)
    assert all(text.startswith("<s>") for text in rejected.text)  # struck
    heatmap = next(trace for trace in figure.data if trace.type == "heatmap")
    assert len(heatmap.z) == len(event.nodes) - 1 and len(heatmap.z[0]) == len(event.nodes)
    words = figure_words(event, run.speculative.round_texts[event.round_index].nodes, True)
    assert words["title"].startswith(f"Round {event.round_index + 1}: ")
    # The lane reads as text, the kept path only, with a branch count (shown on demand) on each round that checked
    # a tree.
    lane = run.speculative.html("speculative")
    marks = re.findall(r'<sup class="tree-mark on-demand"[^>]*>(\d+)</sup>', lane)
    assert marks and [int(mark) for mark in marks] == [num_branches(event) for event in tree_rounds(run)
                                                       if num_branches(event) > 1]
    for event in tree_rounds(run):  # the lane draws the judged chain only, not the tree's other branches
        body = lane.split(f'data-round="{event.round_index + 1}">')[1].split('class="round-sep"')[0]
        assert body.count('class="tok ') == len(event.shown_tokens())


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_how_it_works_tells_one_tree_round_in_the_inspectors_words(runs, temperature):
    """The explainer names a tree round: what it proposed, the one pass, which path won and, where a branch
    lost, why; the same sentences the inspector opens with."""
    run = runs[temperature]
    html = render.explain_html(run)
    widest = max((e for e in tree_rounds(run) if num_branches(e) > 1), key=num_branches)
    texts = run.speculative.round_texts[widest.round_index].nodes
    drafted = render.tree_round.drafted_nodes(widest)
    summary = rule.tree_summary_sentence(widest.round_index + 1, f"{len(drafted)} guesses", num_branches(widest),
                                         render.tree_round.tree_depth(widest),
                                         sum(widest.nodes[i].verdict == "accepted" for i in drafted),
                                         render.tree_round.kept_text(widest, texts))
    assert escape_text(summary) in html
    assert "in one forward pass" in html and "Open that round in the inspector" in html
    assert ("Where did" in html) or ("the text ended there" in html) or ("end of text" in html)


def test_step_mode_tells_a_tree_round_in_stages_with_each_nodes_why():
    """Step mode runs the page's tree: a round's stages grow, verify under the mask, walk (each tried node with
    the inspector's own why), the kept path, the target's own token, the caches; its chart is the tree."""
    from specviz.app.step_mode import words as step_words
    from specviz.app.step_mode.session import StepRun

    pair = load_pair("tiny-code")
    prompt = load_prompts(PRESETS["tiny-code"].prompts_file)[0]
    prompt_ids = pair.encode(prompt.text, False)
    config = DecodeConfig(gamma=4, tree=8, max_new_tokens=24, temperature=1.0, drafter="model", seed=0)
    step = StepRun(pair, prompt_ids, config)
    view = render.RunView(prompt.text, prompt_ids, config.gamma, {"temperature": 1.0, "tree": 8}, lanes=("speculative",))
    for event in step.start():
        view.add(event, pair.decode)
    for _ in range(6):
        for event in step.advance():
            view.add(event, pair.decode)
    step.close()
    event = next(event for event in view.speculative.trace.rounds if any(n.verdict == "rejected" for n in event.nodes))
    texts = view.speculative.round_texts[event.round_index]
    stages = step_words.round_html(event, texts, view.speculative.labels, 0, "model", None, greedy=False)
    names = re.findall(r'data-stage="(\w+)"', stages)
    assert names == ["draft", "verify", "accept", "verdict", "correction", "rollback"], names
    assert "tree mask" in stages and "Walk down the tree" in stages
    rejected = next(i for i, node in enumerate(event.nodes) if node.verdict == "rejected")
    why = node_lines(event, texts.nodes, greedy=False)[rejected].split("\n")[1]
    assert render.escape_text(why) in stages


def test_a_tree_round_an_accepted_end_of_text_cut_short_has_no_target_token_and_says_so():
    """The engine leaves the target's own token out of the tree where an accepted end-of-text ended the text:
    the words, the table, the figure and step mode's stages say the text ended, never name a missing token."""
    from specviz.app.step_mode import words as step_words
    from specviz.decoding.events import RoundEvent, TreeNode

    tree = (TreeNode(7, -1, 1, 0.6, "accepted", 0.9, 0.9, 0.1), TreeNode(8, -1, 1, 0.2, "unexamined"),
            TreeNode(9, 0, 2, 0.5, "unexamined"))
    event = RoundEvent("speculative", 2, 5, 2, tree, 1, 0, "resample", (7,), 0.01, 0.02, 2, 1, shape="tree")
    texts = ["<eos>", " a", " b"]
    html = render.tree_round.tree_inspector_html(event, texts, greedy=False)
    assert escape_text(rule.ended_sentence("'<eos>'")) in html and html.count("tree-row") == 3
    figure = plots_tree.tree_figure(event, **figure_words(event, texts, False))
    assert figure.layout.title.text.endswith("the text ended there")
    stages = step_words.tree_stages(event, texts, greedy=False)
    assert [stage[0] for stage in stages][-2:] == ["correction", "rollback"]
    assert stages[-2][2] == as_sentence(rule.END_OF_TEXT_WORDS)
    from specviz.app.plots_round import target_cells
    from specviz.app.render.lanes import RoundTexts

    cells = target_cells(event, RoundTexts(drafted=[], nodes=texts), greedy=False)  # the round drawn: no own token
    assert len(cells) == event.num_verify_rows == 4 and cells[-1].kind == "unexamined" and cells[-1].text == "unused"


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_how_it_works_tells_a_tree_round_as_the_tree_it_was(runs, temperature):
    """In tree mode "In this run" told a tree round's rejection as a chain ("the draft proposed ' x'", one token,
    where the one pass had checked a tree): every round it cites as a tree round is told with its tree's words."""
    run = runs[temperature]
    explained = render.explain_html(run)
    cited = [event for event in tree_rounds(run) if f"In round {event.round_index + 1} the drafter proposed" in explained]
    assert not cited, [event.round_index + 1 for event in cited]
    assert "Open that round in the inspector" in explained
