"""A run as a link and as a command: the page's prompt, model and settings written into a URL query
that restores them when opened (`?prompt=...&model=sure-gsm-dllm&k=2`: the settings that differ from
what the model shows), and the `lopa generate --model ...` command line that decodes the same run
(the settings that differ from what `lopa generate` resolves on that model). Pure functions over the
settings inputs (app.serving.session.SETTING_NAMES), plus the thin callbacks the wiring uses and the bound on
a link's length (BoundLinkLength).

A DiffusionGemma folder picked for its own panel (app/panels/denoise/) rides along: `canvas=<folder>` and
the panel's settings that differ from their defaults (`canvas_seed=3`); the link reopens that folder in
the panel (canvas_query, read_canvas_link, open_canvas_link). The `lopa generate` command has no
DiffusionGemma counterpart (`python -m lopa.models.diffusion_gemma` decodes one), so it leaves them out.

A link comes from anyone, so it is read the way every other surface reads a setting: each value
through the registry (lopa.settings.Setting.parse; the panel's through denoise.read_setting), the prompt
cut to MAX_PROMPT_CHARS, a folder only where any model box value could name it (LOPA_MODEL_DIRS), and
a link that cannot be read whole keeps what it can and says what it dropped."""

from __future__ import annotations

import shlex
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import gradio as gr

from lopa import DecodeSettings
from lopa.resolution import DEFAULT_K, resolve, settings_diff
from lopa.settings import SETTINGS, ModelSpec

from ...serving.inputs import shown
from ...serving.model_cache import MODELS
from ...serving.models import MODELS_DIR, short_path
from ...serving.request import read_request, shown_settings
from ...serving.session import SETTING_NAMES
from ..denoise import callbacks as denoise
from ..viz import esc

FIELDS = ("prompt", *SETTING_NAMES)
MODEL_FIELD = "model"                        # the query field naming the model (a bundled name or a folder)
MAX_ADDRESS_CHARS = 2000                     # a page address longer than this is not one the link keeps
MAX_PROMPT_CHARS = 4000                      # a link longer than this is not a link anyone shares
# A page address whose query is longer than this is cut before Gradio sees it: past 64 KiB Gradio
# fails with HTTP 500 (httpx refuses the URL) before any of the app's code runs. A link of the
# longest prompt and every setting stays far below it.
MAX_QUERY_BYTES = 16_384
CUT_MARK = "cut"                             # the query field that says which fields the cut dropped
CANVAS_FIELD = "canvas"                      # the DiffusionGemma folder the session picked (app/panels/denoise/)
CANVAS_PREFIX = "canvas_"                    # + a panel setting's name (denoise.PANEL_SETTINGS): its value


def session_model(session) -> tuple[Path, ModelSpec | None]:
    """(folder, spec) of the session's model; spec None while it is not loaded (nothing is loaded here:
    the links follow the inputs outside the queue)."""
    try:
        folder = MODELS.folder(getattr(session, "model", None))
    except ValueError:              # a folder this server no longer loads: Run says so; the links use the default
        folder = MODELS.default
    loaded = MODELS.peek(folder)
    return folder, (loaded.spec if loaded is not None else None)


def model_field(folder: Path) -> str:
    """How a link names a model: a bundled model by its name, any other by its folder."""
    folder = Path(folder)
    return folder.name if folder.resolve().parent == MODELS_DIR.resolve() else str(folder)


def share_query(prompt: str, settings: DecodeSettings, spec: ModelSpec | None = None, folder: Path | None = None,
                canvas: dict | None = None) -> str:
    """`?prompt=...&model=...&k=...`: the prompt, the model (unless it is the default) and where `settings`
    (a request resolved on the model with `spec`) differ from what the inputs show for that model
    (app.serving.request.shown_settings), so the link opens on the same run; then `canvas`, the DiffusionGemma
    panel's fields (canvas_query)."""
    query = {"prompt": (prompt or "")[:MAX_PROMPT_CHARS]}
    if folder is not None and MODELS.key(folder) != MODELS.key(MODELS.default):
        query[MODEL_FIELD] = model_field(folder)
    return "?" + urlencode({**query, **settings_diff(settings, shown_settings(spec)), **(canvas or {})})


def canvas_query(session, *panel) -> dict:
    """A link's DiffusionGemma fields: the folder the session picked for the panel and the panel's settings
    (its raw input values in denoise.PANEL_SETTINGS order) that differ from their defaults (0); {} when no
    folder is picked. ValueError naming a setting that does not read."""
    folder = getattr(session, "canvas_model", None)
    if not folder:
        return {}
    settings = denoise.panel_settings(*panel)
    return {CANVAS_FIELD: model_field(Path(folder)), **{CANVAS_PREFIX + n: v for n, v in settings.items() if v}}


def read_canvas_link(query: dict) -> tuple[Path | None, dict, list[str]]:
    """(folder, {panel setting: value}, what was dropped) from a link's DiffusionGemma fields: the folder
    only where the server may load it and it holds a DiffusionGemma checkpoint (denoise.canvas_folder, which
    says why not), each setting read by denoise.read_setting. Without a folder the settings are not read
    (nothing to decode)."""
    text = query.get(CANVAS_FIELD)
    if CANVAS_FIELD in str(query.get(CUT_MARK) or "").split(","):
        return None, {}, [f"{CANVAS_FIELD}: the link was too long and was cut"]
    if not text:
        return None, {}, []
    try:
        folder = denoise.canvas_folder(str(text)[:MAX_PROMPT_CHARS])
    except ValueError as err:               # not allowed here, unreadable, not what its config says
        return None, {}, [f"{CANVAS_FIELD}={shown(str(text))} dropped: {err}"]
    if folder is None:
        return None, {}, [f"{CANVAS_FIELD}={shown(str(text))} dropped: not a DiffusionGemma checkpoint"]
    settings, notes = {}, []
    for name in denoise.PANEL_SETTINGS:
        if CANVAS_PREFIX + name in query:
            try:
                settings[name] = denoise.read_setting(name, str(query[CANVAS_PREFIX + name]))
            except ValueError as err:
                notes.append(str(err))
    return folder, settings, notes


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
            read_request(out[1:]).resolve()
            break
        except ValueError as err:
            i = taken.pop()
            notes.append(f"{FIELDS[i]}={out[i]!r} dropped: {err}")
            out[i] = current[i]
    return out, notes


def read_model_field(query: dict) -> tuple:
    """(the model box's new value, or gr.skip(), and what was dropped) from a link's `model=`. The folder is
    checked here, as the model box checks a typed one (MODELS.folder: its name, LOPA_MODEL_DIRS, a folder a
    loader may read; then MODELS.servable), so a folder this server will not load never reaches the box: the
    page keeps the session's model, says why in the link's notes, and Run decodes with the model it shows.
    (Through the box, a refused folder was a round trip: the box took it, the model event refused it and put
    the session's model back, and a Run pressed meanwhile met the refusal.) Loading is left to the box's
    event (app.model_and_settings.pick_model), which says what a folder that then fails to load lacks."""
    text = query.get(MODEL_FIELD)
    if MODEL_FIELD in str(query.get(CUT_MARK) or "").split(","):
        return gr.skip(), [f"{MODEL_FIELD}: the link was too long and was cut"]
    if not text:
        return gr.skip(), []
    text = str(text)[:MAX_PROMPT_CHARS]
    try:
        MODELS.servable(MODELS.folder(text))
    except ValueError as err:               # not allowed here, unreadable, a name no folder has
        return gr.skip(), [f"{MODEL_FIELD}={shown(text)} dropped: {err}"]
    return text, []


def restore(query: dict, current: list) -> list:
    """The page's input values from a URL query (read_link without its notes)."""
    return read_link(query, current)[0]


def command_line(prompt: str, settings: DecodeSettings, spec: ModelSpec | None = None, folder: Path | None = None) -> str:
    """The `lopa generate` command that decodes the same prompt with `settings` (a request resolved on the
    model with `spec`) on the same model: it names --model, and spells out every setting where they differ
    from what `lopa generate` resolves on that model with no flags."""
    folder = Path(folder if folder is not None else MODELS.default)
    parts = ["python", "-m", "lopa", "generate", "--model", short_path(folder), "--prompt", prompt or ""]
    for name, value in settings_diff(settings, resolve({}, spec, defaults={"k": DEFAULT_K})).items():
        parts += [SETTINGS[name].flag, str(value)]
    return shlex.join(parts)


# -- callbacks --------------------------------------------------------------------------------------
def on_load(request: gr.Request, session, *current):
    """Apply the URL's query to the inputs when the page opens (a shared link). Outputs: the inputs
    (prompt, then SETTING_NAMES), the model box (the link's model: picking it applies it,
    app.panels.model.pick_model) and the status, which says what the link could not give. The
    session's touched settings become the page's (none, until the visitor sets one), with those the link
    set: they are the visitor's request (app/serving/request.py), kept when the model is applied. Last output: the
    session itself, handed back so that Gradio keeps it as the page's (it times a State's time-to-live, and
    ends it with the page, from the event that last set it; app/page.py)."""
    query = dict(request.query_params) if request is not None else {}
    session.page = True                   # a Run's final figures wait until the page shows them (callbacks.draw_figures)
    touched = set(getattr(session, "touched", None) or ())
    if not query:
        session.touched = frozenset(touched)
        return (*(gr.skip() for _ in range(len(current) + 2)), session)
    values, notes = read_link(query, list(current))
    session.touched = frozenset(touched | {n for n in SETTING_NAMES if n in query and _read(n, query[n])
                                           == values[FIELDS.index(n)]})
    model, dropped = read_model_field(query)
    notes += dropped
    if not notes:
        return (*values, model, gr.skip(), session)
    message = "The shared link was read in part. Dropped: " + esc("; ".join(notes))    # it quotes the link
    gr.Warning(message)
    return (*values, model, message, session)


def open_canvas_link(request: gr.Request, session) -> tuple:
    """Apply the URL's DiffusionGemma fields when the page opens: the session's picked folder (as picking
    it in the model box would) and the panel's settings. Outputs: the panel's folder line, its settings
    inputs (denoise.PANEL_SETTINGS order) and its status, which says what the link could not give."""
    query = dict(request.query_params) if request is not None else {}
    folder, settings, notes = read_canvas_link(query)
    if folder is not None:
        session.canvas_model = str(folder)
    inputs = tuple(gr.update(value=settings[n]) if n in settings else gr.skip() for n in denoise.PANEL_SETTINGS)
    status = f"**⚠ The shared link was read in part.** Dropped: {esc('; '.join(notes))}" if notes else gr.skip()
    return (denoise.folder_line(session) if folder is not None else gr.skip(), *inputs, status)


def _read(name: str, text):
    """The link's value of setting `name`, or None where the registry refuses it."""
    try:
        return SETTINGS[name].parse(str(text))
    except ValueError:
        return None


def page_address(request: gr.Request | None) -> str:
    """The page's own address without its query, as the browser that asks gave it (its Referer: the page
    that sent the request), or "" where it did not (the link is then the query alone)."""
    referer = str(request.headers.get("referer", "")) if request is not None else ""
    parts = urlsplit(referer)
    if len(referer) > MAX_ADDRESS_CHARS or parts.scheme not in ("http", "https") or not parts.netloc:
        return ""
    return urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))


def links(request: gr.Request, session, prompt: str, *values) -> tuple[str, str]:
    """(share link, command line) for the current inputs on the session's model: `values` are the settings
    inputs (SETTING_NAMES), then the DiffusionGemma panel's (denoise.PANEL_SETTINGS), which the link
    carries with the folder picked for it. The link is the page's address (page_address) and share_query.
    `request` is annotated gr.Request, not Optional: Gradio 6.31 passes the request only to a parameter
    annotated with the class itself (callers outside Gradio pass None).
    The settings are the session's request (app.serving.request.read_request) resolved once; a request that does
    not read or resolve is named in both."""
    settings, panel = values[:len(SETTING_NAMES)], values[len(SETTING_NAMES):]
    folder, spec = session_model(session)
    try:
        resolved = read_request(settings, getattr(session, "touched", None)).resolve(spec)
    except ValueError as err:
        return f"(fix the settings first: {err})", f"# {err}"
    try:
        link = page_address(request) + share_query(prompt, resolved, spec=spec, folder=folder,
                                                   canvas=canvas_query(session, *panel))
    except ValueError as err:                   # a DiffusionGemma panel setting that does not read
        link = f"(fix the settings first: {err})"
    return link, command_line(prompt, resolved, spec=spec, folder=folder)


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
