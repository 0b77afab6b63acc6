"""Colour-blind-safe colours: Okabe-Ito for categories, viridis for confidence, RdBu for signed changes.

Okabe & Ito (2008) "Color Universal Design"; viridis and ColorBrewer RdBu are readable with the
common forms of colour blindness. Every figure that uses a colour also draws its legend.
"""

from __future__ import annotations

import math

from .markup import esc

OKABE_ITO = {
    "black": "#000000", "orange": "#E69F00", "sky_blue": "#56B4E9", "green": "#009E73",
    "yellow": "#F0E442", "blue": "#0072B2", "vermillion": "#D55E00", "purple": "#CC79A7", "grey": "#999999",
}
# Roles, so figures agree on what a colour means.
ANCHOR_COLOUR = OKABE_ITO["blue"]
LOOKAHEAD_COLOUR = OKABE_ITO["orange"]
WINNER_COLOUR = OKABE_ITO["vermillion"]
EDIT_COLOUR = OKABE_ITO["purple"]          # token editing: a committed token rewritten
CACHED_COLOUR = "#d9d9d9"
MISSING_COLOUR = "#f2f2f2"
# Text on the page meets WCAG AA, 4.5:1 against what it sits on (tests/test_contrast_browser.py measures it).
# Gradio's default theme draws its secondary text (help under a setting, a slider's ends, the footer) in
# #bbbbc2 (1.9:1 on white) and white on orange-500 buttons (2.8:1); the page's theme takes these instead.
SUBDUED_TEXT = "#52525b"       # zinc-600: 7.7:1 on white
PRIMARY_BUTTON = "#c2410c"     # orange-700: white on it 5.2:1, hovered (orange-800) more
PRIMARY_BUTTON_HOVER = "#9a3412"
THEME_COLOURS = {"body_text_color_subdued": SUBDUED_TEXT, "button_primary_background_fill": PRIMARY_BUTTON,
                 "button_primary_background_fill_hover": PRIMARY_BUTTON_HOVER}    # gr.themes.Default().set(**...)
# Status badges carry white text: Okabe-Ito hues darkened until white reads at >= 4.5:1 on them.
STATUS_COLOURS = {"running": "#0072B2", "done": "#00795A", "stopped": "#B34700", "idle": "#666666",
                  "replay": "#A3487A", "paused": "#8A5F00"}

VIRIDIS = ["#440154", "#482878", "#3e4989", "#31688e", "#26828e", "#1f9e89", "#35b779", "#6ece58", "#b5de2b", "#fde725"]
DIVERGING = "RdBu"   # plotly name; red = the extra token lowered Conf, blue = raised it


def _rgb(hex_colour: str) -> tuple[int, int, int]:
    h = hex_colour.lstrip("#")
    return int(h[0:2], 16), int(h[2:4], 16), int(h[4:6], 16)


def viridis(value: float) -> str:
    """Hex colour for a value in [0, 1] (clamped); grey for nan."""
    if value is None or math.isnan(value):
        return OKABE_ITO["grey"]
    x = min(max(float(value), 0.0), 1.0) * (len(VIRIDIS) - 1)
    i = min(int(x), len(VIRIDIS) - 2)
    a, b, t = _rgb(VIRIDIS[i]), _rgb(VIRIDIS[i + 1]), x - i
    return "#" + "".join(f"{round(ca + (cb - ca) * t):02x}" for ca, cb in zip(a, b))


def luminance(colour: str) -> float:
    """WCAG 2 relative luminance of a hex colour."""
    def channel(c: int) -> float:
        c = c / 255
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4
    r, g, b = (channel(c) for c in _rgb(colour))
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a: str, b: str) -> float:
    """WCAG 2 contrast ratio of two hex colours, 1 to 21."""
    la, lb = sorted((luminance(a), luminance(b)))
    return (lb + 0.05) / (la + 0.05)


def faded(colour: str, amount: float = 0.55) -> str:
    """`colour` mixed with white (`amount` of white): a muted fill that still carries its hue. Text on it takes
    text_on(faded(...)); an opacity would fade the text with it, below 4.5:1."""
    return "#" + "".join(f"{round(c + (255 - c) * amount):02x}" for c in _rgb(colour))


def text_on(background: str) -> str:
    """Black or white text, whichever contrasts more with `background`. They tie at luminance 0.179,
    where each gives 4.58:1, so the pick always meets WCAG AA (4.5:1)."""
    return "#000000" if contrast("#000000", background) >= contrast("#ffffff", background) else "#ffffff"


def swatch(colour: str) -> str:
    """A legend's colour key: a small box outlined in dark grey, so it reads on white whatever its fill (a
    coloured ■ was text, and Okabe-Ito orange on white is 2.2:1)."""
    return (f'<span class="lopa-swatch" style="display:inline-block;width:10px;height:10px;vertical-align:-1px;'
            f'background:{esc(colour)};border:1px solid #333333"></span>')


def viridis_legend(label: str) -> str:
    """A small HTML gradient bar 0 -> 1 for viridis fills."""
    stops = ", ".join(VIRIDIS)
    return (f'<span style="display:inline-flex;align-items:center;gap:4px;font-size:12px">{esc(label)}: 0'
            f'<span style="display:inline-block;width:110px;height:12px;border-radius:2px;'
            f'background:linear-gradient(90deg, {stops})"></span>1</span>')
