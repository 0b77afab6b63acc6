"""A run as a link and as a command: the page's prompt and settings written into a URL query that
restores them when opened (`?prompt=...&k=4&order=random`), and the equivalent `lopa generate`
command line. Pure functions over the settings inputs (app.session.SETTING_NAMES), plus the thin
callbacks the wiring uses and the bound on a link's length (BoundLinkLength).

A link comes from anyone, so it is read the way every other surface reads a setting: each value
through the registry (lopa.settings.Setting.parse), the prompt cut to MAX_PROMPT_CHARS, and a link
that cannot be read whole keeps what it can and says what it dropped."""

from __future__ import annotations

import shlex
from urllib.parse import parse_qsl, urlencode

import gradio as gr

from lopa import DecodeSettings
from lopa.settings import SETTINGS

from .models import MODELS
from .session import SETTING_NAMES, parse_ui

FIELDS = ("prompt", *SETTING_NAMES)
MAX_PROMPT_CHARS = 4000                      # a link longer than this is not a link anyone shares
# A page address whose query is longer than this is cut before Gradio sees it: past 64 KiB Gradio
# fails with HTTP 500 (httpx refuses the URL) before any of the app's code runs. A link of the
# longest prompt and every setting stays far below it.
MAX_QUERY_BYTES = 16_384
CUT_MARK = "cut"                             # the query field that says which fields the cut dropped


def settings_of(values) -> DecodeSettings:
    """The settings inputs -> DecodeSettings (ValueError naming the bad setting)."""
    return parse_ui(*values)[0]


def chosen(settings: DecodeSettings) -> dict:
    """The settings a link or a command must spell out: those that differ from the engine's defaults,
    plus k and max_new_tokens (the app's own defaults differ from the engine's)."""
    defaults = DecodeSettings().to_dict()
    return {k: v for k, v in settings.to_dict().items() if v != defaults[k] or k in ("k", "max_new_tokens")}


def share_query(prompt: str, *values) -> str:
    """`?prompt=...&k=...`: the prompt and the chosen settings."""
    return "?" + urlencode({"prompt": (prompt or "")[:MAX_PROMPT_CHARS], **chosen(settings_of(values))})


def read_link(query: dict, current: list) -> tuple[list, list[str]]:
    """(the page's input values, what was dropped) from a URL query ({name: text}). Each field is read
    by the registry; one it refuses, or one that breaks the combination (max_new_tokens against
    block_size), keeps `current` (prompt first, then SETTING_NAMES) and is named in the notes with the
    reason. Unknown fields are ignored; the prompt is cut to MAX_PROMPT_CHARS."""
    out, notes, taken = list(current), [], []
    for name in (query.get(CUT_MARK) or "").split(","):
        if name in FIELDS:
            notes.append(f"{name}: the link was too long and was cut")
    for i, name in enumerate(FIELDS):
        if name not in query:
            continue
        text = str(query[name])
        if name == "prompt":
            out[i] = text[:MAX_PROMPT_CHARS]
            if len(text) > MAX_PROMPT_CHARS:
                notes.append(f"prompt: cut to its first {MAX_PROMPT_CHARS} characters (of {len(text)})")
            continue
        try:
            out[i] = SETTINGS[name].parse(text)
        except ValueError as err:
            notes.append(str(err))
            continue
        taken.append(i)
    while taken:                                 # a combination the engine refuses: undo the link's last fields
        try:
            settings_of(out[1:])
            break
        except ValueError as err:
            i = taken.pop()
            notes.append(f"{FIELDS[i]}={out[i]!r} dropped: {err}")
            out[i] = current[i]
    return out, notes


def restore(query: dict, current: list) -> list:
    """The page's input values from a URL query (read_link without its notes)."""
    return read_link(query, current)[0]


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
        parts += [SETTINGS[name].flag, str(value)]
    return shlex.join(parts)


# -- callbacks --------------------------------------------------------------------------------------
def on_load(request: gr.Request, *current):
    """Apply the URL's query to the inputs when the page opens (a shared link); the last output is
    the status, which says what the link could not give."""
    query = dict(request.query_params) if request is not None else {}
    if not query:
        return tuple(gr.skip() for _ in range(len(current) + 1))
    values, notes = read_link(query, list(current))
    if not notes:
        return (*values, gr.skip())
    message = "The shared link was read in part. Dropped: " + "; ".join(notes)
    gr.Warning(message)
    return (*values, message)


def links(prompt: str, *values) -> tuple[str, str]:
    """(share query, command line) for the current inputs."""
    try:
        query = share_query(prompt, *values)
    except ValueError as err:
        query = f"(fix the settings first: {err})"
    return query, command_line(prompt, *values)


# -- the length bound, before Gradio ------------------------------------------------------------------
def cut_query(query: bytes) -> bytes:
    """A query string made short enough for Gradio: the prompt cut to MAX_PROMPT_CHARS, any other field
    longer than a setting can be dropped, and CUT_MARK naming what changed (read_link reports it)."""
    fields = parse_qsl(query.decode("latin-1"), keep_blank_values=True)
    kept, cut = [], []
    for name, value in fields:
        limit = MAX_PROMPT_CHARS if name == "prompt" else 64
        if len(value) > limit:
            cut.append(name)
            if name != "prompt":
                continue
            value = value[:MAX_PROMPT_CHARS]
        kept.append((name, value))
    short = urlencode([*kept, (CUT_MARK, ",".join(cut))]).encode()
    return short if len(short) <= MAX_QUERY_BYTES else urlencode([(CUT_MARK, "prompt")]).encode()


class BoundLinkLength:
    """ASGI middleware: a page request whose query is over MAX_QUERY_BYTES is redirected to the same
    page with cut_query's query, so an over-long shared link opens the page and says what it lost
    instead of failing with HTTP 500 inside Gradio."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        query = scope.get("query_string", b"") if scope.get("type") == "http" else b""
        if len(query) <= MAX_QUERY_BYTES:
            return await self.app(scope, receive, send)
        location = (scope.get("root_path", "") + scope.get("path", "/")).encode() + b"?" + cut_query(query)
        await send({"type": "http.response.start", "status": 303,
                    "headers": [(b"location", location), (b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})
