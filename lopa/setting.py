"""One setting's declaration (`setting(...)`, a dataclass field's metadata) and its registry entry (`Setting`):
its type, default, range or choices, the paper's value, and its words: what it is called in plain words
(`words`), what each of its choices is called (`choice_words`), and its help. Every surface says it the same
way: the app's input shows `title` and `explain()`, the command line's flag help `explain()` too, and messages
name it by `label` with its range as `describe()` says it. lopa/settings.py declares the decode settings with it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field


def number_words(x: float) -> str:
    """A number as a person reads it: at most four significant digits (ln 2 is 0.6931)."""
    return f"{x:.4g}"


def sentence(text: str) -> str:
    """`text` as a sentence: a capital first letter, a full stop at the end."""
    text = text.strip()
    if not text:
        return text
    first = text.split()[0]       # a code name (order=adaptive, next_best) keeps its case
    return (text[0].upper() if first.isalpha() else text[0]) + text[1:] + ("" if text.endswith((".", "!", "?")) else ".")


@dataclass(frozen=True)
class Setting:
    """One decode setting as the registry holds it (read from a DecodeSettings field's metadata).

    low / high (numbers, open_low / open_high for strict bounds) or choices: what a value may be.
    paper: the paper's value (Table 5's GSM8K row; None where the paper fixes none).
    app: whether the app shows it as an input. label: how messages name it."""
    name: str
    type: type
    default: object
    help: str
    low: float | None = None
    high: float | None = None
    open_low: bool = False
    open_high: bool = False
    choices: tuple | None = None
    paper: object = None
    app: bool = True
    label: str = ""
    words: str = ""                    # what it is, in plain words ("commit threshold")
    choice_words: tuple = ()           # ((choice, its name in words), ...), one per choice

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def title(self) -> str:
        """Its name in plain words with the code name beside it: "commit threshold (tau_conf)"."""
        return f"{self.words} ({self.name})" if self.words else self.name

    def choice_title(self, choice: str) -> str:
        """A choice in words with its code name: "one token a round (top1)"."""
        words = dict(self.choice_words).get(choice)
        return f"{words} ({choice})" if words else choice

    def allowed(self) -> str:
        """What a value may be, in a sentence with its numbers rounded: "A whole number from 0 to 32."."""
        if self.choices is not None:
            return "One of: " + "; ".join(self.choice_title(c) for c in self.choices) + "."
        if self.type is int:
            return f"A whole number from {self.low} to {self.high}."
        low, high = number_words(self.low), number_words(self.high)
        if not (self.open_low or self.open_high):
            return f"A number from {low} to {high}."
        low = f"above {low}" if self.open_low else f"from {low}"
        high = f"below {high}" if self.open_high else f"at most {high}"
        return f"A number {low}, {high}."

    def explain(self) -> str:
        """Its help in sentences, then what a value may be: what the app's input and the command line's flag
        both say."""
        return f"{sentence(self.help)} {self.allowed()}"

    def describe(self) -> str:
        """What a value may be, as messages say it: 'an integer in 0..32', 'in (0, 1]', 'one of (...)'."""
        if self.choices is not None:
            return f"one of {self.choices}"
        if self.type is int:
            return f"an integer in {self.low}..{self.high}"
        return f"in {'(' if self.open_low else '['}{self.low:g}, {self.high:g}{')' if self.open_high else ']'}"

    def error(self, value, hint: str = "") -> ValueError:
        """The registry's message for a value this setting refuses (`hint`: what kind of value it wanted),
        quoting at most a short prefix of the value: the one wording every surface's reading uses."""
        shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
        return ValueError(f"{self.label or self.name} must be {self.describe()}{hint}, got {shown}")

    def _inside(self, value) -> bool:
        above = value > self.low if self.open_low else value >= self.low
        below = value < self.high if self.open_high else value <= self.high
        return above and below

    def check(self, value):
        """`value` if it has this setting's type and range (an int is a float here); ValueError otherwise."""
        if self.choices is not None:
            if not isinstance(value, str) or value not in self.choices:
                raise self.error(value)
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.error(value, " (a number)" if self.type is float else "")
        if self.type is int:
            if not isinstance(value, int) or not self._inside(value):
                raise self.error(value)
            return value
        if not math.isfinite(value) or not self._inside(value):
            raise self.error(value)
        return float(value)

    def parse(self, value):
        """`value` as typed by a person or a client (a number, its text, a whole float for an int),
        then check()ed: the one reading of the app's inputs, share links and /decode. The message
        quotes what was given."""
        if value is None or (isinstance(value, str) and not value.strip()):
            raise ValueError(f"{self.label or self.name} is empty (it must be {self.describe()})")
        if self.choices is not None:
            return self.check(value)
        given = value
        if isinstance(value, str):
            try:
                value = float(value.strip())
            except ValueError:
                raise self.error(given, " (a number)") from None
        if self.type is int and isinstance(value, float):
            if not value.is_integer():
                raise self.error(given, " (a whole number)")
            value = int(value)
        try:
            return self.check(value)
        except ValueError:
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            raise self.error(given, "" if number else " (a number)") from None


def setting(default, help: str, *, low=None, high=None, open_low=False, open_high=False, choices=None,
            paper=None, app=True, label="", words="", choice_words=None):
    """A DecodeSettings field with its registry entry (see Setting) in the field's metadata. `choice_words`:
    {choice: its name in words}, one for every choice."""
    if choice_words is not None and set(choice_words) != set(choices or ()):
        raise ValueError(f"choice_words must name every choice of {choices}, got {sorted(choice_words)}")
    meta = dict(help=help, low=low, high=high, open_low=open_low, open_high=open_high, choices=choices,
                paper=paper, app=app, label=label, words=words,
                choice_words=tuple((c, choice_words[c]) for c in choices) if choice_words else ())
    return field(default=default, metadata={"lopa": meta})


_TYPES = {"int": int, "float": float, "str": str}


def registry(declared) -> dict[str, Setting]:
    """{name: Setting} of a dataclass whose fields are declared with setting(), in declaration order."""
    return {f.name: Setting(f.name, _TYPES[f.type], f.default, **f.metadata["lopa"]) for f in dataclasses.fields(declared)}
