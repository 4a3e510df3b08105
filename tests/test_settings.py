"""One home for each setting: the API's signature (as gradio documents it), the page's controls,
Request.parse and the CLI's `generate` all start from DecodeConfig's defaults. Read from each place, not
from the declarations, and again with DecodeConfig's defaults moved, so a control or the API that grows
its own literal fails here even while that literal happens to equal today's default."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
ENGINE_SETTINGS = ("gamma", "temperature", "top_k", "top_p", "max_new_tokens", "seed", "ngram", "draft_confidence",
                   "gamma_schedule", "rivals", "tree")
# Every one moved off today's default, inside each page control's range (max new tokens stays under a host's cap).
MOVED = {"gamma": 5, "temperature": 0.35, "top_k": 7, "top_p": 0.85, "max_new_tokens": 33, "seed": 11, "ngram": 2,
         "draft_confidence": 0.25, "gamma_schedule": "heuristic", "rivals": 1, "tree": 4}


def defaults_everywhere() -> dict[str, dict[str, object]]:
    """Where each engine setting's default is read: place → name → value."""
    from specviz.app import ui
    from specviz.app.request import Request
    from specviz.cli.arguments import build_parser

    demo = ui.build_app(preload=False)
    parameters = demo.get_api_info()["named_endpoints"]["/generate"]["parameters"]
    api = {p["parameter_name"]: p["parameter_default"] for p in parameters if p["parameter_has_default"]}
    controls = {block.elem_id: getattr(block, "value", None) for block in demo.blocks.values() if getattr(block, "elem_id", None)}
    request = Request.parse(prompt="hi", pair="tiny-code").config
    cli = build_parser().parse_args(["generate", "--prompt", "hi"])
    return {
        "api": {name: api[name] for name in ENGINE_SETTINGS},
        "page": {name: controls[name.replace("_", "-")] for name in ENGINE_SETTINGS},
        "request": {name: getattr(request, name) for name in ENGINE_SETTINGS},
        "cli generate": {name: getattr(cli, name) for name in ENGINE_SETTINGS},
    }


def test_the_api_the_page_request_and_the_cli_start_from_the_engines_defaults():
    from specviz.decoding.config import DecodeConfig

    engine = {name: getattr(DecodeConfig(), name) for name in ENGINE_SETTINGS}
    for place, values in defaults_everywhere().items():
        assert values == engine, place


MOVE_AND_READ = f"""
import json, sys
from dataclasses import MISSING, fields
sys.path.insert(0, {str(REPO)!r})
from specviz.decoding import config
moved = json.loads(sys.argv[1])
# The class attributes (read as DecodeConfig.x) and __init__'s defaults (DecodeConfig()), before anything reads them.
for name, value in moved.items():
    setattr(config.DecodeConfig, name, value)
config.DecodeConfig.__init__.__defaults__ = tuple(
    moved.get(f.name, f.default) for f in fields(config.DecodeConfig) if f.default is not MISSING)
from tests.test_settings import defaults_everywhere
print(json.dumps(defaults_everywhere()))
"""


def test_a_literal_anywhere_would_show_when_the_engines_defaults_move():
    from specviz.decoding.config import DecodeConfig

    assert all(f.default is not None for f in fields(DecodeConfig))  # every default is a plain value (no factory)
    result = subprocess.run([sys.executable, "-c", MOVE_AND_READ, json.dumps(MOVED)], cwd=REPO, capture_output=True,
                            text=True, timeout=300, env={**__import__("os").environ, "GRADIO_ANALYTICS_ENABLED": "False"})
    assert result.returncode == 0, result.stderr[-3000:]
    for place, values in json.loads(result.stdout.strip().splitlines()[-1]).items():
        assert values == MOVED, place


def test_every_setting_is_declared_once_and_derived_everywhere():
    import inspect

    from specviz.app import section_jobs, settings, ui, ui_handlers
    from specviz.app.run_section import page as run_section
    from specviz.app.request import Request
    from specviz.decoding.config import DecodeConfig

    names = [setting.name for setting in settings.SETTINGS]
    assert len(names) == len(set(names))
    assert list(inspect.signature(ui.generate).parameters) == names  # the API, in the declarations' order
    assert ui_handlers.RUN_INPUTS == (*names, "pace")
    assert set(run_section.SLIDER_NAMES) == {setting.name for setting in settings.SETTINGS if setting.kind == "slider"}
    assert set(section_jobs.CONTROL_NAMES) == set(names) - {"reference"}
    recorded = Request.parse("hi", "tiny-code").settings
    assert list(recorded) == [setting.name for setting in settings.SETTINGS if setting.recorded]
    config_fields = {field.name for field in fields(DecodeConfig)}
    for setting in settings.SETTINGS:
        if setting.in_config and setting.name != "drafter":  # the drafter's default is the pair's own
            assert setting.default == getattr(DecodeConfig(), setting.name), setting.name
        assert setting.kind in settings.KINDS and setting.parse in settings.PARSE_RULES
        assert setting.in_config == (setting.name in config_fields)
        if setting.kind == "slider":
            assert setting.minimum <= setting.default <= setting.maximum, setting.name


@pytest.mark.parametrize(("settings_given", "message"), [
    ({"gamma": 99}, "gamma (γ, tokens drafted per round) must be an integer from 1 to 16, got 99"),  # the engine's check
    ({"rivals": 1.5}, "rival guesses must be a whole number"),
    ({"tree": 99}, "the tree budget must be an integer from 0 (a chain) to 24 nodes, got 99"),
    ({"top_p": "x"}, "top-p must be a number"),
    ({"chat": "maybe"}, "chat must be true or false"),
    ({"seed": -1}, "seed must be from 0"),
])
def test_request_parse_checks_by_the_declared_rule(settings_given, message):
    from specviz.app.request import Request

    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Request.parse("hi", "tiny-code", **settings_given)


def test_a_setting_the_engine_applies_at_temperature_0_only_says_so_on_the_page_and_in_the_cli():
    """The declaration holds which temperatures a setting applies to (`greedy_only`); the page's label and
    the CLI's help are read from it, not written into each."""
    from specviz.app import settings, ui
    from specviz.cli.arguments import build_parser

    greedy_only = {setting.name for setting in settings.SETTINGS if setting.greedy_only}
    assert greedy_only == {"rivals"}  # the engine drafts rivals only where the drafter picks its top token
    demo = ui.build_app(preload=False)
    labels = {block.elem_id: getattr(block, "label", None) for block in demo.blocks.values() if getattr(block, "elem_id", None)}
    generate = next(action for action in build_parser()._subparsers._group_actions[0].choices["generate"]._actions
                    if "--rivals" in action.option_strings)
    for setting in settings.SETTINGS:
        marked = (labels.get(setting.elem_id) or "").endswith("(temperature 0 only)")
        assert marked == setting.greedy_only, setting.name
    assert generate.help.startswith("temperature 0 only: ")


def test_a_declared_setting_the_config_has_no_field_for_is_refused_not_dropped():
    from argparse import Namespace

    from specviz.cli.commands import config_from
    from specviz.decoding.config import DecodeConfig

    args = Namespace(gamma=5, prompt="hi", temperture=0.7)
    assert config_from(args, ("gamma", "prompt"), DecodeConfig, elsewhere=("prompt",)).gamma == 5
    with pytest.raises(TypeError, match="temperture"):
        config_from(args, ("gamma", "temperture"), DecodeConfig)
