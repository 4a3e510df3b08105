"""Save and replay a run, one section: its layout (the download of the last run, a recorded run or an uploaded
file, the speed), the run file it reads and writes (specviz.analysis.run), and the controls a replay sets so that
Run repeats it live. A replay streams into the lanes like a run (ui_handlers.on_replay, wired beside Run and Stop).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import gradio as gr

from specviz.analysis.run import Run, recorded_runs
from specviz.app.render.lanes import RunView
from specviz.app.request import CUSTOM
from specviz.app.settings import replayed_settings
from specviz.models.presets import PRESETS, preset_name

REPLAY_SPEEDS = {"0.25×": 0.25, "1× (as recorded)": 1.0, "4×": 4.0, "at once": float("inf")}
SAVED_RUNS_DIR = Path(tempfile.gettempdir()) / "specviz-runs"
SAVED_RUNS_KEPT = 200  # the newest files kept, so a busy server's disk use stays bounded


@dataclass
class Replay:
    """Save and replay: the download of the last run, and what to replay at which speed."""

    download: gr.DownloadButton
    pick: gr.Dropdown
    file: gr.File
    speed: gr.Radio
    button: gr.Button


def build_replay() -> Replay:
    recorded = list(recorded_runs())
    with gr.Accordion("Save and replay a run", open=False):
        with gr.Row():
            download = gr.DownloadButton("Download this run (JSON)", visible=False, elem_id="run-download")
            pick = gr.Dropdown(recorded, value=recorded[0] if recorded else None, label="recorded runs",
                               elem_id="replay-pick")
            file = gr.File(label="or upload a run file", file_types=[".json", ".gz"], type="filepath",
                           elem_id="replay-file")
            speed = gr.Radio(list(REPLAY_SPEEDS), value="1× (as recorded)", label="replay speed",
                             elem_id="replay-speed")
        button = gr.Button("Replay", elem_id="replay-run")
    return Replay(download, pick, file, speed, button)


def replay_pace_words(speed_name: str) -> str:
    """"at 4×", but "at once" for the speed already named so (not "at at once")."""
    return speed_name if speed_name.startswith("at ") else f"at {speed_name}"


def load_replay(pick, upload) -> Run:
    """The run to replay: an uploaded file, else the recorded run picked."""
    if upload:
        return Run.load(upload)
    runs = recorded_runs()
    if not pick:
        raise ValueError("pick a recorded run or upload a run file (saved with the page's download or `generate --save`)")
    if pick not in runs:
        raise ValueError(f"unknown recorded run {pick!r}; choose one of: {', '.join(runs) or 'none shipped'}")
    return Run.load(runs[pick])


def replayed_controls(saved: Run) -> dict[str, object]:
    """Control name → value that repeats a saved run: its prompt, pair and every replayed setting it recorded,
    or that did not exist when it was recorded (settings.replayed_settings); others keep their values."""
    settings = saved.settings
    values: dict[str, object] = {"prompt": saved.prompt_text, "chat": saved.chat}
    pair = settings.get("pair")
    if isinstance(pair, str) and preset_name(pair) in PRESETS:  # a run saved under an old name gets today's
        values["pair"] = preset_name(pair)
    elif isinstance(pair, str) and " → " in pair:  # a custom pair, recorded as "draft → target"
        values["draft_id"], values["target_id"] = pair.split(" → ", 1)
        values["pair"] = CUSTOM
    values.update(replayed_settings(settings))
    return values


def save_for_download(run: RunView) -> str:
    """The run's file for the page's download, named by its run id; the oldest beyond SAVED_RUNS_KEPT go. (Names
    that cycled through the run id modulo SAVED_RUNS_KEPT relied on one process numbering the runs: on a ZeroGPU
    Space every worker numbers its own, and two visitors' runs would have shared a file.)"""
    SAVED_RUNS_DIR.mkdir(parents=True, exist_ok=True)
    path = SAVED_RUNS_DIR / f"specviz-run-{run.run_id}.json"
    run.run.save(path)
    saved = sorted(SAVED_RUNS_DIR.glob("specviz-run-*.json"), key=modified_at, reverse=True)
    for old in saved[SAVED_RUNS_KEPT:]:
        old.unlink(missing_ok=True)  # another process may have taken it first
    return str(path)


def modified_at(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:  # gone meanwhile (another process's pruning): the oldest, so it goes first
        return 0.0
