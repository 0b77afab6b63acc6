"""LoPA Explorer: `python app.py [--host H] [--port P]` (also GRADIO_SERVER_NAME / GRADIO_SERVER_PORT).
The Hugging Face Space entry point. The model loads on first use, except on a ZeroGPU Space, where
it loads here, at import, before the GPU workers fork (app/serving/gpu.py). Installed from the wheel, the
same app starts with `lopa app`."""

import argparse

from app import DEFAULT_HOST, DEFAULT_PORT, build_demo, serve
from app.serving.model_cache import preload

preload()
demo = build_demo()

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Serve the LoPA Explorer")
    parser.add_argument("--host", default=DEFAULT_HOST)
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    args = parser.parse_args()
    serve(args.host, args.port, demo)
