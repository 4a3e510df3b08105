"""Run `app.py` with only the hub's metadata call replaced, for tests of a public server.

`specviz.models.hosting.read_hub_file_sizes` is the one call that asks the Hugging Face Hub about a
custom model before anything is downloaded; here it answers from SPECVIZ_TEST_HUB_ANSWERS
(JSON: {model id: {file name: bytes}}; an id not there is a model the hub lacks) and appends
each id it is asked about to the file SPECVIZ_TEST_HUB_CALLS, one a line. Everything else
(the policy, the loaders, gradio) is the app as it ships.

Usage: python tests/serve_with_fake_hub.py   (with GRADIO_SERVER_PORT etc. as for app.py)
"""

from __future__ import annotations

import json
import os
import runpy
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from specviz.models import hosting  # noqa: E402 — after the path, so this checkout's specviz is the one patched

ANSWERS: dict[str, dict[str, int | None]] = json.loads(os.environ.get("SPECVIZ_TEST_HUB_ANSWERS") or "{}")
CALLS_FILE = os.environ.get("SPECVIZ_TEST_HUB_CALLS")


def read_hub_file_sizes(model_id: str) -> dict[str, int | None] | None:
    if CALLS_FILE:
        with open(CALLS_FILE, "a", encoding="utf-8") as calls:
            calls.write(json.dumps(model_id) + "\n")  # JSON: an id with odd characters stays one line
    return ANSWERS.get(model_id)


hosting.read_hub_file_sizes = read_hub_file_sizes  # check_model_id looks it up in the module at each call

if __name__ == "__main__":
    runpy.run_path(str(ROOT / "app.py"), run_name="__main__")
