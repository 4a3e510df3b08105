"""The drafter contract: the engine calls drafters only through specviz.decoding.drafters.Drafter's members,
no module outside the catalogue compares drafter names, and a new drafter is its class plus one entry.
Read from the source (ast) for the first two, so a late import or a helper function counts too."""

from __future__ import annotations

import ast
from pathlib import Path

import torch

import specviz.catalogue
from specviz.app.drafters_about import words as drafters_about
from specviz.catalogue import DRAFTER_NAMES, DrafterInfo
from specviz.cli.terminal import drafter_description
from specviz.decoding.config import DecodeConfig
from specviz.decoding.drafters import Drafter, Proposal
from specviz.decoding.engine import autoregressive_decode, speculative_decode
from specviz.analysis.trace import Trace
from tests.tiny_models import tiny_pair

PACKAGE = Path(__file__).resolve().parent.parent / "specviz"


def source_trees() -> list[tuple[str, ast.AST]]:
    return [(path.relative_to(PACKAGE).as_posix(), ast.parse(path.read_text())) for path in PACKAGE.rglob("*.py")]


def names_a_drafter(node: ast.AST) -> bool:
    """`drafter`, `self.drafter`, `pair.drafter`…: an expression that is (or holds) a drafter object."""
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return "drafter" in name.lower()


def test_no_module_asks_a_drafter_what_it_has_by_hasattr_or_getattr():
    """What a drafter can do is declared on the contract (grows_trees, reads_target, …), so nobody probes it."""
    probes = [f"{name}:{node.lineno}" for name, tree in source_trees() for node in ast.walk(tree)
              if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("hasattr", "getattr") and node.args and names_a_drafter(node.args[0])]
    assert probes == []


def test_no_module_outside_the_catalogue_compares_or_looks_up_a_drafter_by_name():
    """Behaviour comes from the catalogue's flags or the drafter's class, never from `drafter == "head"`."""
    named = []
    for name, tree in source_trees():
        if name == "catalogue.py":
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare):  # `config.drafter == "head"` (a training recipe may share the name)
                operands = [node.left, *node.comparators]
                if not any(names_a_drafter(operand) for operand in operands):
                    continue
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "drafter_info":
                operands = node.args
            elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "DRAFTER_INFO":
                operands = [node.slice]
            else:
                continue
            if any(isinstance(operand, ast.Constant) and operand.value in DRAFTER_NAMES for operand in operands):
                named.append(f"{name}:{node.lineno}")
    assert named == []


class RepeatDrafter(Drafter):
    """A throwaway drafter: guesses that the last token repeats. Chains only, nothing kept between rounds."""

    def __init__(self, vocab_size: int):
        self.vocab_size = vocab_size

    @classmethod
    def build(cls, pair, config, to_probs, generator) -> "RepeatDrafter":
        return cls(pair.vocab_size)

    def propose(self, committed_ids: torch.Tensor, num_tokens: int) -> Proposal:
        draft_ids = committed_ids[0, -1:].repeat(num_tokens)  # (γ,)
        return Proposal(draft_ids, torch.nn.functional.one_hot(draft_ids, self.vocab_size).float(), 0)  # q one-hot


REPEAT = DrafterInfo(
    name="repeat", drafter=f"{__name__}:RepeatDrafter", label="repeater", description="repeat the last token",
    needs_draft_model=False, needs_head=False, prefill_words="", source_words="the last token, again", caches="",
    hf_equivalent="", diagram=((("the last token", "plain"),), (("guess", "plain"),)),
    about="<b>The repeater</b> guesses that the last token comes again.")


def test_a_new_drafter_is_its_class_plus_one_catalogue_entry(monkeypatch):
    """Registered only in the catalogue, it runs exactly (greedy: the target alone's text) in chains and in a
    tree run (it grows no trees, so it drafts chains there), is named by the CLI and drawn on the page."""
    monkeypatch.setitem(specviz.catalogue.DRAFTER_INFO, REPEAT.name, REPEAT)
    monkeypatch.setattr(drafters_about, "DRAFTER_CATALOGUE", (*specviz.catalogue.DRAFTER_CATALOGUE, REPEAT))
    pair = tiny_pair("llama")
    prompt = [5, 6, 7, 7, 7]
    for tree in (0, 6):
        config = DecodeConfig(gamma=3, tree=tree, max_new_tokens=16, stop_at_eos=False, drafter=REPEAT.name)
        baseline = Trace.from_events(autoregressive_decode(pair, prompt, config))
        speculative = Trace.from_events(speculative_decode(pair, prompt, config))
        assert speculative.token_ids == baseline.token_ids
        assert all(not event.is_tree for event in speculative.rounds) and max(e.gamma for e in speculative.rounds) == 3
    assert drafter_description(pair, config) == "repeater"
    figures = drafters_about.read_drafter_figures()
    assert "repeater" in drafters_about.diagram_html(figures) and "The repeater" in drafters_about.sizes_html(figures)


def test_the_catalogue_names_each_drafters_class_and_its_base_is_the_contract():
    for info in specviz.catalogue.DRAFTER_CATALOGUE:
        cls = specviz.catalogue.resolve(info.drafter)
        assert issubclass(cls, Drafter) and cls.build is not Drafter.build and cls.propose is not Drafter.propose
        assert not cls.grows_trees or cls.propose_tree is not Drafter.propose_tree
        assert info.diagram and info.about  # the page draws and describes every drafter from its entry
