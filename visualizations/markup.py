"""The one escape: every value that reaches the page as HTML text or an attribute goes through
`esc`. Traces come from files anyone can share and token strings from any tokenizer, so nothing
read from them is ever inserted raw (style habit 16)."""

import html


def esc(value) -> str:
    """Any value as safe HTML text or attribute content (quotes escaped too)."""
    return html.escape(str(value), quote=True)
