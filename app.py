"""LoPA Explorer: `python app.py [--host H] [--port P]` (also GRADIO_SERVER_NAME / GRADIO_SERVER_PORT).
The Hugging Face Space entry point; the model loads on first use, not here."""

import argparse
import os

from app import LAUNCH_KWARGS, build_demo

demo = build_demo()

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Serve the LoPA Explorer")
    parser.add_argument("--host", default=os.environ.get("GRADIO_SERVER_NAME", "0.0.0.0"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("GRADIO_SERVER_PORT", "7860")))
    args = parser.parse_args()
    demo.launch(server_name=args.host, server_port=args.port, **LAUNCH_KWARGS)
