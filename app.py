"""specviz: speculative decoding, live. `python app.py` serves it (Hugging Face Spaces runs this file).

Host and port come from GRADIO_SERVER_NAME / GRADIO_SERVER_PORT (default 127.0.0.1:7860).
"""

from specviz.app import zerogpu  # noqa: F401 — first: ZeroGPU's `spaces` must come before anything touches CUDA
from specviz.app.ui import LAUNCH_OPTIONS, build_app

demo = build_app()

if __name__ == "__main__":
    demo.launch(**LAUNCH_OPTIONS)
