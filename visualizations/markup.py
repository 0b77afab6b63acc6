"""The one escape: every value that reaches the page as HTML text or an attribute goes through
`esc`. Traces come from files anyone can share and token strings from any tokenizer, so nothing
read from them is ever inserted raw (style habit 16)."""

import html


def esc(value) -> str:
    """Any value as safe HTML text or attribute content (quotes escaped too). A lone surrogate (the bytes of
    a file name that are not UTF-8, as Python decodes them) is written as its escape (`\\udcff`): the page's
    messages quote file names, and a surrogate cannot be sent at all (the server's JSON fails with a codec
    error instead of the message)."""
    text = str(value)
    if not text.isascii():
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return html.escape(text, quote=True)
