"""What a study declares, once, at the top of its module (`STUDY = Study(...)`): its command name, its
title, where it lists, its own knobs (each like a setting: name, type, range, default, one line of
help) and what it emits (its tables, whether it draws a figure, the units its live progress counts).

Everything else is generated from the declaration: the command line (`python -m lopa.study NAME`,
parser()), the app's Studies inputs and the keywords its live() takes (live_knobs, live_values), the
shipped file names (files()) and the figure titles (lopa.study.figures.shipped_title, app/panels/studies/
titles()). discover() finds the declarations: every module of lopa/study/ with a top-level `STUDY =`.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import pkgutil
import re
import sys
from dataclasses import dataclass, replace
from pathlib import Path

DECLARES = re.compile(r"^STUDY\s*=", re.M)      # a module that declares a study, read before it is imported


@dataclass(frozen=True)
class Knob:
    """One of a study's own inputs: the flag --<name> (underscores as dashes), the keyword its live() takes
    and, where `live` is given, the app's input study_<name>."""
    name: str
    type: type                                  # int, float or str
    default: object                             # None: unset (the study says what it takes instead)
    help: str                                   # one line, as --help prints it
    low: float | None = None                    # the range the command line accepts (None: unbounded)
    high: float | None = None
    live: tuple[int, int, int] | None = None    # the app's live run: (low, high, default); None: command line only
    label: str = ""                             # the app's words for it ("random orders"); default the name

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def words(self) -> str:
        return self.label or self.name.replace("_", " ")

    def check(self, value):
        """`value` where it is in range; a ValueError naming the flag and the range otherwise."""
        if value is not None and ((self.low is not None and value < self.low)
                                  or (self.high is not None and value > self.high)):
            bounds = f"[{self.low if self.low is not None else '-inf'}, {self.high if self.high is not None else 'inf'}]"
            raise ValueError(f"{self.flag} must be in {bounds}; got {value}")
        return value


@dataclass(frozen=True)
class Study:
    """A study of lopa.study. `n` set: it runs on the studies' common frame (lopa.study.common: model,
    problems, output, every decode setting but `per_row`, its default lookahead `k`); None: its module
    adds its own frame to the parser. `app`: the app shows it, and its module also has live(loaded,
    problems, base, **its live knobs), live_summary, figure, png and report."""
    name: str
    title: str
    rank: int                                   # where it lists (CLI and app): docs/studies.md's order
    knobs: tuple[Knob, ...] = ()
    n: int | None = None
    per_row: tuple[str, ...] = ()
    k: int = 4
    tables: tuple[str, ...] = ("",)             # emits <name>[_<suffix>].csv / .parquet per suffix, <name>.json
    figure: bool = False                        # ... and <name>.html / .png
    units: str = "decodes"                      # what a live run's progress counts
    app: bool = False
    module: str = ""                            # the module that declares it (filled in by discovery)

    def load(self):
        """Its module (the one that declares it: the module's own STUDY finds it through the registry)."""
        if not self.module:
            return discover()[self.name].load()
        return importlib.import_module(f"lopa.study.{self.module}")

    @property
    def varies_k(self) -> bool:
        """Whether each of its rows sets its own k (then no one k names its results)."""
        return "k" in self.per_row

    def file(self, ext: str, suffix: str = "") -> str:
        """The name of one file it writes (lopa.tasks.results.write_results): <name>[_<suffix>].<ext>."""
        return f"{self.name}{'_' + suffix if suffix else ''}.{ext}"

    def files(self) -> list[str]:
        """The names of every file it writes, the shipped ones among them."""
        return ([self.file(ext, suffix) for suffix in self.tables for ext in ("csv", "parquet")] + [self.file("json")]
                + ([self.file("html"), self.file("png")] if self.figure else []))

    @property
    def live_knobs(self) -> tuple[Knob, ...]:
        return tuple(knob for knob in self.knobs if knob.live is not None)

    def live_values(self, values: dict) -> dict:
        """The keywords its live() takes, out of `values` ({knob name: value}, any study's): its own only."""
        return {knob.name: values[knob.name] for knob in self.live_knobs}

    def parser(self) -> argparse.ArgumentParser:
        """Its command line: `python -m lopa.study NAME`, the module's docstring as the description, the
        common frame where `n` is set, then its knobs."""
        parser = argparse.ArgumentParser(prog=f"python -m lopa.study {self.name}", description=self.load().__doc__,
                                         formatter_class=argparse.RawDescriptionHelpFormatter)
        if self.n is not None:
            from lopa.study.common import add_common_arguments
            add_common_arguments(parser, n=self.n, per_row=self.per_row, k=self.k)
        for knob in self.knobs:
            parser.add_argument(knob.flag, type=knob.type, default=knob.default, help=knob.help)
        return parser

    def parse(self, argv=None, parser: argparse.ArgumentParser | None = None) -> argparse.Namespace:
        """parse_args of parser() (or of `parser`, made by it and added to), each knob checked in its range."""
        parser = parser or self.parser()
        args = parser.parse_args(argv)
        for knob in self.knobs:
            try:
                knob.check(getattr(args, knob.name))
            except ValueError as err:
                parser.error(str(err))
        return args


@functools.cache
def discover() -> dict[str, Study]:
    """{name: Study} of every module in lopa.study's folders (the package's __path__) that declares one, in
    rank order. A module is imported only where its source declares a study (figures, stats and the other
    helpers are not)."""
    package = sys.modules["lopa.study"]             # imported already: this module is inside it
    found = []
    for info in pkgutil.iter_modules(package.__path__):
        path = Path(info.module_finder.path) / f"{info.name}.py"
        if info.ispkg or not path.is_file() or not DECLARES.search(path.read_text(encoding="utf-8")):
            continue
        study = getattr(importlib.import_module(f"lopa.study.{info.name}"), "STUDY", None)
        if isinstance(study, Study):
            found.append(replace(study, module=info.name))
    names = [s.name for s in found]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise RuntimeError(f"two studies are called {twice[0]!r}: each study needs a name of its own")
    return {s.name: s for s in sorted(found, key=lambda s: (s.rank, s.name))}
