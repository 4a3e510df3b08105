"""A run as data: the prompt, the settings and every lane's trace, saved and replayed as one file.

A `Run`, built from the event stream, holds any number of lanes in the order they ran. It also keeps the
text the tokenizer gave for every id sequence the page asked about (`texts`), so a saved run replays through
the same rendering with no model and no tokenizer: the replay asks the same questions in the same order.
The file is JSON with a format name and a version; anything else gives a RunFileError a user can act on.
"""

from __future__ import annotations

import gzip
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from specviz.catalogue import lane_info
from specviz.decoding.events import Event, model_seconds, take_turns
from specviz.analysis.trace import Trace

RUNS_DIR = Path(__file__).resolve().parents[2] / "assets" / "runs"  # recorded runs the page offers
RUN_FORMAT = "specviz-run"
# 2: every round stores its nodes (RoundEvent.nodes), a chain as a linear tree. Version 1 told most rounds as their
# chain views (`drafted`, `rivals`, `tree`); it is refused, and the runs in assets/ were rewritten as version 2.
RUN_VERSION = 2
# A run's setting saying its lanes took turns (take_turns); runs recorded before went one lane after another
IN_TURNS = "lanes_in_turns"
# What a run of engine.decode_lanes records of how its lanes ran, wherever it is recorded (the page, the CLI)
DECODED_IN_TURNS = {IN_TURNS: True}
MAX_RUN_FILE_BYTES = 20_000_000  # a 512-token run with the inspector's details is ~1 MB
Decode = Callable[[list[int]], str]


class RunFileError(ValueError):
    """A run file that cannot be replayed: not JSON, not a run, or another version."""


@dataclass
class Run:
    """One run: what was asked, and each lane's trace, in the order the lanes ran."""

    prompt_text: str
    prompt_ids: list[int]
    settings: dict  # pair, γ, drafter, sampling, max new tokens, seed, chat: as the user set them
    chat: bool = False  # the prompt went through the pair's chat template
    lanes: dict[str, Trace] = field(default_factory=dict)
    texts: dict[tuple[int, ...], str] = field(default_factory=dict)  # decode(ids) answers, for replay

    def add(self, event: Event) -> None:
        self.lanes.setdefault(event.lane, Trace(lane=event.lane)).add(event)

    def trace(self, lane: str) -> Trace:
        """The lane's trace; an empty one if the lane has not started (or is not in this run)."""
        return self.lanes.get(lane) or Trace(lane=lane)

    def events(self) -> list[Event]:
        """Every event in the order it happened. A run whose lanes took turns (IN_TURNS) takes them again: the turns
        depend only on the model seconds its events recorded, so the same rule gives the same order; then each other
        lane, alone. Runs recorded before lanes took turns ran one lane after another."""
        turns = [lane for lane in self.lanes if self.settings.get(IN_TURNS) and lane_info(lane).in_turns]
        taken = list(take_turns([(lane, iter(self.lanes[lane].events())) for lane in turns])) if turns else []
        return taken + [event for lane, trace in self.lanes.items() if lane not in turns for event in trace.events()]

    @property
    def done(self) -> bool:
        return bool(self.lanes) and all(trace.done for trace in self.lanes.values())

    # --- text, recorded and replayed ----------------------------------------------------------
    def recording(self, decode: Decode) -> Decode:
        """decode, remembering every answer so the run can be replayed without the tokenizer."""

        def recorded(ids: list[int]) -> str:
            key = tuple(ids)
            if key not in self.texts:
                self.texts[key] = decode(list(ids))
            return self.texts[key]

        return recorded

    def replayed_decode(self, ids: list[int]) -> str:
        """decode for a replay: the recorded answer ("?" for a question the live run never asked)."""
        return self.texts.get(tuple(ids), "?")

    # --- the file ---------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {
            "format": RUN_FORMAT,
            "version": RUN_VERSION,
            "prompt_text": self.prompt_text,
            "prompt_ids": list(self.prompt_ids),
            "settings": self.settings,
            "chat": self.chat,
            "lanes": [trace.to_dict() for trace in self.lanes.values()],
            "texts": [[list(ids), text] for ids, text in self.texts.items()],
        }

    @classmethod
    def from_dict(cls, data) -> "Run":
        check_header(data)
        try:
            run = cls(str(data["prompt_text"]), [int(i) for i in data["prompt_ids"]], dict(data["settings"]),
                      bool(data.get("chat", False)))
            for lane in data["lanes"]:
                trace = Trace.from_dict(lane)
                run.lanes[trace.lane] = trace
            run.texts = {tuple(int(i) for i in ids): str(text) for ids, text in data["texts"]}
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise RunFileError(f"this run file is damaged ({type(error).__name__}: {error}); save the run again") from None
        return run

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> "Run":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise RunFileError(f"this is not a specviz run file: it is not JSON ({error.msg} at line {error.lineno})") from None
        return cls.from_dict(data)

    def save(self, path: str | Path) -> None:
        """JSON, gzip-compressed when the name ends in .gz (as the recorded runs in assets/ are)."""
        data = self.to_json().encode("utf-8")
        Path(path).write_bytes(gzip.compress(data, mtime=0) if str(path).endswith(".gz") else data)

    @classmethod
    def load(cls, path: str | Path) -> "Run":
        path = Path(path)
        try:
            size = path.stat().st_size
            if size > MAX_RUN_FILE_BYTES:
                raise RunFileError(f"this run file is {size / 1e6:.0f} MB; specviz reads run files up to {MAX_RUN_FILE_BYTES // 1_000_000} MB")
            data = path.read_bytes()
            if data[:2] == b"\x1f\x8b":  # gzip
                data = gzip.decompress(data)
                if len(data) > MAX_RUN_FILE_BYTES:
                    raise RunFileError(f"this run file unpacks to over {MAX_RUN_FILE_BYTES // 1_000_000} MB")
            text = data.decode("utf-8")
        except (UnicodeDecodeError, gzip.BadGzipFile, EOFError):
            raise RunFileError("this is not a specviz run file: it is not text") from None
        except OSError as error:
            raise RunFileError(f"cannot read the run file: {error.strerror or error}") from None
        return cls.from_json(text)


def recorded_runs() -> dict[str, Path]:
    """The runs shipped in assets/runs, by a readable name (the file name without extensions)."""
    if not RUNS_DIR.is_dir():
        return {}
    files = sorted(RUNS_DIR.glob("*.json.gz")) + sorted(RUNS_DIR.glob("*.json"))
    return {path.name.split(".")[0].replace("--", " · ").replace("-", " "): path for path in files}


def check_header(data) -> None:
    if not isinstance(data, dict) or data.get("format") != RUN_FORMAT:
        raise RunFileError("this is not a specviz run file (save one with `generate --save` or the page's download)")
    version = data.get("version")
    if version == 1:
        raise RunFileError(
            "this run file is version 1, an older format that told each round as a chain of drafts; this specviz "
            f"reads version {RUN_VERSION}, in which every round stores its draft tree: record the run again"
        )
    if version != RUN_VERSION:
        raise RunFileError(
            f"this run file is version {version!r}, and this specviz reads version {RUN_VERSION}: "
            "record it again with this version"
        )


def check_speed(speed: float) -> float:
    try:
        speed = float(speed)
    except (TypeError, ValueError):
        raise ValueError(f"the replay speed must be a number, got {speed!r}") from None
    if not speed > 0 or math.isnan(speed):
        raise ValueError(f"the replay speed must be above 0 (1 = as recorded, 2 = twice as fast; inf = at once), got {speed!r}")
    return speed


def replay(run: Run, speed: float = 1.0, sleep: Callable[[float], None] = time.sleep) -> Iterator[Event]:
    """The run's events again, each after the model time it took live, divided by `speed`."""
    speed = check_speed(speed)
    for event in run.events():
        delay = model_seconds(event) / speed
        if delay > 0 and not math.isinf(speed):
            sleep(delay)
        yield event
