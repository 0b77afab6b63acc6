"""A click's raw inputs as a request, and the one resolution of it into the settings that run.

`read_request` reads every input a click sends (the settings inputs, SETTING_NAMES, optionally followed
by the backend's, BACKEND_NAMES) through the registry (Setting.parse: a message naming the first bad
one) and keeps, as what the visitor set, the settings they touched (Session.touched: typed or picked by
hand, a paper preset, a shared link); every other setting is unset and takes the model's own value or
the app's default. Unset means that and only that: an input touched and left equal to what the page
showed is still the visitor's. A caller with no page (an API client: its session's `touched` is None)
touched every input it sends a value for; one it sends as None (or blank) is unset, which is what the
API lists as the default of every setting (app.serving.blocks.Explorer.get_api_info). `Request.resolve` is the one resolution (lopa.resolution.resolve) that
Run, Step, Compare, the share link and the command line take their settings from; the settings title
counts the touched names and resolves nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lopa import DecodeSettings
from lopa.resolution import resolve
from lopa.settings import SETTINGS, ModelSpec, check_settings

from .session import APP_DEFAULTS, BACKEND_NAMES, SETTING_NAMES, Backend, backend_from_ui


@dataclass(frozen=True)
class Request:
    """What one click asks for: the settings the visitor set ({name: value}, read by the registry; a
    name left out is unset) and the backend."""
    settings: dict = field(default_factory=dict)
    backend: Backend = Backend()

    def resolve(self, spec: ModelSpec | None = None) -> DecodeSettings:
        """The settings this request decodes on the model with `spec` (None: no model's own values):
        what the visitor set over the model's own values over APP_DEFAULTS. ValueError when the
        combination is refused (a length that is not whole blocks)."""
        return resolve(self.settings, spec, defaults=APP_DEFAULTS)


def touched_names(touched) -> tuple[str, ...]:
    """The settings (SETTING_NAMES order) a session's `touched` names; None (no page) names them all."""
    if touched is None:
        return SETTING_NAMES
    touched = set(touched)
    return tuple(name for name in SETTING_NAMES if name in touched)


def read_request(values, touched=None) -> Request:
    """The request of a click: `values` are the settings inputs (SETTING_NAMES), optionally followed by
    the backend inputs (BACKEND_NAMES); `touched` the session's touched names (None: all). Every input
    is read, touched or not, so a bad one is named before any model is touched; ValueError names it."""
    n, nb = len(SETTING_NAMES), len(BACKEND_NAMES)
    values = tuple(values)
    if len(values) not in (n, n + nb):
        raise ValueError(f"expected the {n} settings {SETTING_NAMES} (optionally followed by {BACKEND_NAMES}), "
                         f"got {len(values)} values")
    sent = dict(zip(SETTING_NAMES, values))
    if touched is None:         # no page: what the caller left out (None, blank) is unset; the page names an empty box
        sent = {name: v for name, v in sent.items() if not (v is None or (isinstance(v, str) and not v.strip()))}
    given = check_settings(sent)
    backend = backend_from_ui(*values[n:])
    return Request({name: given[name] for name in touched_names(touched) if name in given}, backend)


def shown_settings(spec: ModelSpec | None = None) -> DecodeSettings:
    """What the settings inputs show for the model with `spec` before the visitor touches any: the
    resolution of an empty request (a Dream-format checkpoint that asks for full attention shows full)."""
    return Request().resolve(spec)


def follow_model(spec: ModelSpec | None, touched, *values) -> tuple:
    """The settings inputs' values (SETTING_NAMES order) on the model with `spec`: an input the visitor
    touched keeps its value; every other shows what the model resolves to, with the touched ones as the
    request (a length follows a touched block size). A touched input that cannot be read, or a touched
    combination the model refuses, is left for Run to name."""
    given, request = dict(zip(SETTING_NAMES, values)), {}
    for name in touched_names(touched):
        try:
            request[name] = SETTINGS[name].parse(given[name])
        except ValueError:
            request[name] = None
    for attempt in (request, {**request, "max_new_tokens": None}, {}):
        try:
            settings = Request(attempt).resolve(spec)
            break
        except ValueError:
            continue
    else:
        return tuple(values)
    return tuple(given[name] if name in request else getattr(settings, name) for name in SETTING_NAMES)
