"""A run as a link and as a command: the page's prompt and settings written into a URL query that
restores them when opened (`?prompt=...&k=4&order=random`), and the equivalent `lopa generate`
command line. Pure functions over the settings inputs (in app.session.SETTING_NAMES order, then
the order inputs), plus the two thin callbacks the wiring uses."""

from __future__ import annotations

import shlex
from urllib.parse import urlencode

import gradio as gr

from lopa import DecodeSettings

from .models import MODELS
from .session import ORDER_NAMES, SETTING_NAMES, SINGLE, WORKER_RANGE, parse_ui

FIELDS = ("prompt", *SETTING_NAMES, *ORDER_NAMES)
MAX_PROMPT_CHARS = 4000                      # a link longer than this is not a link anyone shares


def settings_of(values) -> DecodeSettings:
    """The settings inputs followed by the order inputs -> DecodeSettings (ValueError on bad input)."""
    n = len(SETTING_NAMES)
    return parse_ui(*values[:n], SINGLE, WORKER_RANGE[0], *values[n:n + len(ORDER_NAMES)])[0]


def chosen(settings: DecodeSettings) -> dict:
    """The settings a link or a command must spell out: those that differ from the engine's defaults,
    plus k and max_new_tokens (the app's own defaults differ from the engine's)."""
    defaults = DecodeSettings().to_dict()
    return {k: v for k, v in settings.to_dict().items() if v != defaults[k] or k in ("k", "max_new_tokens")}


def share_query(prompt: str, *values) -> str:
    """`?prompt=...&k=...`: the prompt and the chosen settings."""
    return "?" + urlencode({"prompt": (prompt or "")[:MAX_PROMPT_CHARS], **chosen(settings_of(values))})


def restore(query: dict, current: list) -> list:
    """The page's input values from a URL query ({name: text}); missing or unreadable fields keep
    `current` (prompt first, then SETTING_NAMES, then ORDER_NAMES). Only known fields are read."""
    out = list(current)
    for i, name in enumerate(FIELDS):
        if name not in query:
            continue
        text = str(query[name])
        if name == "prompt":
            out[i] = text[:MAX_PROMPT_CHARS]
            continue
        default = current[i]
        try:
            number = isinstance(default, (int, float)) and not isinstance(default, bool)
            out[i] = type(default)(float(text)) if number else text
        except (ValueError, OverflowError):
            pass                                     # an unreadable number keeps the page's value
    try:
        settings_of(out[1:])
    except ValueError:
        return list(current)                         # a combination the engine refuses: ignore the link
    return out


def command_line(prompt: str, *values) -> str:
    """The `lopa generate` command that decodes the same prompt with the same settings."""
    try:
        settings = settings_of(values)
    except ValueError as err:
        return f"# {err}"
    parts = ["python", "-m", "lopa", "generate"]
    loaded = MODELS.loaded
    if loaded is not None and loaded.path != MODELS.default:
        parts += ["--model", str(loaded.path)]
    parts += ["--prompt", prompt or ""]
    for name, value in chosen(settings).items():
        parts += [f"--{name.replace('_', '-')}", str(value)]
    return shlex.join(parts)


# -- callbacks --------------------------------------------------------------------------------------
def on_load(request: gr.Request, *current):
    """Apply the URL's query to the inputs when the page opens (a shared link)."""
    query = dict(request.query_params) if request is not None else {}
    if not query:
        return tuple(gr.skip() for _ in current)
    return tuple(restore(query, list(current)))


def links(prompt: str, *values) -> tuple[str, str]:
    """(share query, command line) for the current inputs."""
    try:
        query = share_query(prompt, *values)
    except ValueError as err:
        query = f"(fix the settings first: {err})"
    return query, command_line(prompt, *values)
