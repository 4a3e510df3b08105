"""The tiny-code pair: ships in assets/, loads offline, and is exact on greedy."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specviz.analysis.bench import load_prompts
from specviz.decoding.config import DecodeConfig
from specviz.decoding.engine import autoregressive_decode, speculative_decode
from specviz.models.compact import COMPACT_FILE
from specviz.models.loading import load_pair
from specviz.models.presets import PRESETS, TINY_CODE_DIR
from specviz.analysis.trace import Trace

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def pair():
    return load_pair("tiny-code")


def load_prompts_of_pair():
    return [prompt.text for prompt in load_prompts(PRESETS["tiny-code"].prompts_file)]


def test_the_tiny_code_preset_ships_in_assets():
    assert Path(PRESETS["tiny-code"].target_id) == TINY_CODE_DIR / "target"
    for name in ("target", "draft"):
        folder = TINY_CODE_DIR / name
        assert (folder / "config.json").is_file() and (folder / COMPACT_FILE).is_file()
        assert (folder / "tokenizer.json").is_file()


def test_assets_stay_small():
    """The working tree travels to a lent GPU machine with every run there, 64 MiB a transfer in
    all: the repo's files must leave half of that for what a run carries beside them (the default
    target's GGUF in parts, wheels), so they stay within 32 MiB."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True, text=True)
    if listed.returncode == 0:
        files = [REPO / name for name in listed.stdout.splitlines()]
    else:  # not a git checkout: count what would matter most
        files = list((REPO / "assets").rglob("*"))
    total = sum(path.stat().st_size for path in files if path.is_file())
    budget = 32 * 2**20
    assert total <= budget, f"the repo's files are {total / 2**20:.1f} MiB, over the {budget / 2**20:.0f} MiB budget"


def test_loads_offline_in_a_fresh_process():
    """A new interpreter with the hub switched off and no network proxy loads the pair."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9"}
    code = (
        "import time; from specviz.models.loading import load_pair; t = time.perf_counter(); p = load_pair('tiny-code'); "
        "import json; print(json.dumps({'s': time.perf_counter() - t, 'name': p.name, 'vocab': p.vocab_size}))"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["name"] == "tiny-code"
    assert report["vocab"] > 256


def test_both_models_share_the_tokenizer(pair):
    from transformers import AutoTokenizer

    draft_tokenizer = AutoTokenizer.from_pretrained(PRESETS["tiny-code"].draft_id)
    assert draft_tokenizer.get_vocab() == pair.tokenizer.get_vocab()
    assert pair.draft.config.vocab_size == pair.target.config.vocab_size == len(pair.tokenizer)


def test_tokenizer_round_trips_the_example_prompts(pair):
    prompts = load_prompts_of_pair()
    assert len(prompts) >= 8
    for prompt in prompts:
        ids = pair.encode(prompt)
        assert pair.decode(ids) == prompt


def test_draft_is_much_cheaper_than_target(pair):
    """Work per token scales with the weights outside the embedding tables."""

    def non_embedding_params(model) -> int:
        embeddings = sum(p.numel() for p in model.get_input_embeddings().parameters())
        positions = sum(p.numel() for name, p in model.named_parameters() if name.endswith("wpe.weight"))
        return sum(p.numel() for p in model.parameters()) - embeddings - positions

    assert non_embedding_params(pair.draft) * 5 < non_embedding_params(pair.target)
    assert pair.draft.config.n_layer < pair.target.config.n_layer


@pytest.fixture(scope="module")
def greedy_baselines(pair):
    """Greedy baseline ids for a few example prompts, computed once."""
    config = DecodeConfig(max_new_tokens=40, stop_at_eos=False)
    return {
        prompt: Trace.from_events(autoregressive_decode(pair, pair.encode(prompt), config)).token_ids
        for prompt in load_prompts_of_pair()[:3]
    }


@pytest.mark.parametrize("gamma", [1, 4, 8])
def test_greedy_speculative_equals_greedy_baseline(pair, greedy_baselines, gamma):
    config = DecodeConfig(gamma=gamma, max_new_tokens=40, stop_at_eos=False)
    for prompt, baseline_ids in greedy_baselines.items():
        speculative = Trace.from_events(speculative_decode(pair, pair.encode(prompt), config))
        assert speculative.token_ids == baseline_ids
        assert len(baseline_ids) == 40


def test_the_draft_is_a_useful_imitation(pair):
    """Distillation worked: the draft agrees with the target on most greedy tokens."""
    config = DecodeConfig(gamma=4, max_new_tokens=48, stop_at_eos=False)
    traces = [Trace.from_events(speculative_decode(pair, pair.encode(p), config)) for p in load_prompts_of_pair()[3:6]]
    accepted = sum(t.num_accepted for t in traces)
    examined = sum(t.num_examined for t in traces)
    assert accepted / examined > 0.5, f"greedy acceptance only {accepted / examined:.2f}"
