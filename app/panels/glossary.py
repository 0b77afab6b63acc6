"""The glossary at the foot of the page: every term the page uses, spelled out (build_glossary). No events: the
counters, the tour and the studies link to its terms."""

from __future__ import annotations

import gradio as gr

from .viz import glossary_html

GLOSSARY_INTRO = "## Terms used on this page"


def build_glossary() -> dict:
    """Every term the page uses, spelled out (the counters, the tour and the studies link here)."""
    with gr.Column(elem_id="glossary"):
        gr.Markdown(GLOSSARY_INTRO)
        terms = gr.HTML(glossary_html(), elem_id="glossary-terms")
    return {"glossary": terms}
