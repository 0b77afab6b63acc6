"""The package's layers, checked: imports go down only, no harness imports another, and no module
reaches itself again.

    core (lopa/*.py) <- models <- distributed <- hf <- tasks <- {train, eval, bench, study} <- cli <- app
    core (lopa/*.py) <- visualizations <- app

The harnesses (train, eval, bench, study) share one level and a rule: none imports another, lazily or
not. What two of them share (problems, prompts, grading, the code sandbox, the bundled model's layout,
the verify-forward timing, the hardware line, result files) lives in the task layer under all four, or
in the core. The visualizations are pure functions of a trace: the core only.

Inside the app, two rooms: what serves (app/serving/: sessions, models, workers, budgets, the framework's
workarounds) under what shows (app/panels/: one place per panel), and the page and its one wiring site
(app/page.py, app/wiring.py) over both. The serving room never imports the panels.

Every import counts, lazy ones inside functions included: a cycle hidden in a lazy import is
still a cycle (docs/style: "Data flows one way").
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HARNESSES = ("train", "eval", "bench", "study")
LAYERS = {"core": 0, "models": 1, "distributed": 2, "hf": 3, "tasks": 4, **dict.fromkeys(HARNESSES, 5),
          "visualizations": 6, "cli": 7, "app": 8}
# Upward edges that are known and on their way out, each with what removes it (none now).
KNOWN_UPWARD: dict[tuple[str, str], str] = {}
# app/panels/viz.py becomes the visualizations package at import time (see its docstring).
ALIASES = {"app.panels.viz": "visualizations"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def sources() -> dict[str, Path]:
    files = [ROOT / "app.py", *ROOT.glob("lopa/**/*.py"), *ROOT.glob("app/**/*.py"), *ROOT.glob("visualizations/**/*.py")]
    return {module_name(f): f for f in files}


def layer(module: str) -> str:
    top, _, rest = module.partition(".")
    if top == "lopa":
        sub = rest.split(".")[0]
        return sub if sub in LAYERS and sub != "core" else ("cli" if sub in ("cli", "__main__") else "core")
    return top if top in LAYERS else "app"          # app.py (the Space entry) belongs to the app


def imports(module: str, path: Path, known: dict) -> set[str]:
    """Project modules that `module` imports anywhere in its file, relative imports resolved."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # `from pkg import sub` imports the submodule pkg.sub where one exists
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for name in names:
            name = ALIASES.get(name, name)
            while name and name not in known:        # `import lopa.models.loading` -> the module itself
                name = name.rpartition(".")[0]
            if name and name != module:
                found.add(name)
    return found


def graph() -> dict[str, set[str]]:
    known = sources()
    return {m: imports(m, p, known) for m, p in known.items()}


def test_imports_only_go_down_the_layers():
    upward = [f"{m} ({layer(m)}) imports {d} ({layer(d)})" for m, deps in graph().items() for d in deps
              if LAYERS[layer(d)] > LAYERS[layer(m)] and (m, d) not in KNOWN_UPWARD]
    assert not upward, "imports that go up the layers:\n" + "\n".join(sorted(upward))


def test_no_harness_imports_another():
    """bench, eval, study and train each import the layers below them only, never each other."""
    sideways = [f"{m} ({layer(m)}) imports {d} ({layer(d)})" for m, deps in graph().items() for d in deps
                if layer(m) in HARNESSES and layer(d) in HARNESSES and layer(d) != layer(m)]
    assert not sideways, "harnesses that import each other:\n" + "\n".join(sorted(sideways))


def test_each_known_upward_edge_still_exists():
    """An exception outlives its edge only by mistake: remove it from KNOWN_UPWARD with the edge."""
    edges = graph()
    gone = [f"{m} -> {d}" for m, d in KNOWN_UPWARD if d not in edges.get(m, set())]
    assert not gone, "KNOWN_UPWARD lists edges that no longer exist: " + ", ".join(gone)


def test_no_import_cycles():
    edges = graph()
    cycles, state = [], {}

    def visit(node, stack):
        state[node] = "open"
        for dep in sorted(edges[node]):
            if state.get(dep) == "open":
                cycles.append(" -> ".join(stack[stack.index(dep):] + [dep]))
            elif dep not in state:
                visit(dep, stack + [dep])
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_visualizations_sit_on_the_core_only():
    """Figures are pure functions of a trace: they import the core and each other, nothing above."""
    above = [f"{m} imports {d} ({layer(d)})" for m, deps in graph().items() if layer(m) == "visualizations"
             for d in deps if layer(d) not in ("core", "visualizations")]
    assert not above, "\n".join(sorted(above))


def test_no_folder_reaches_another_that_reaches_it_back():
    """No loop between folders (bench <-> eval once was one), whatever the modules inside."""
    edges = {(layer(m), layer(d)) for m, deps in graph().items() for d in deps if layer(m) != layer(d)}
    loops = sorted(f"{a} <-> {b}" for a, b in edges if (b, a) in edges and a < b)
    assert not loops, "folders that import each other: " + ", ".join(loops)


# The app's rooms, bottom up: a module may import its own room and the rooms below it.
APP_ROOMS = {"serving": 0, "panels": 1, "page": 2}
MAX_APP_MODULE_LINES = 400


def app_room(module: str) -> str | None:
    """The app's room of `module` (None outside the app): app.serving.*, app.panels.*, or the page (the app
    package, app.page, app.wiring, app.py)."""
    top, _, rest = module.partition(".")
    if top != "app":
        return None
    sub = rest.split(".")[0]
    return sub if sub in ("serving", "panels") else "page"


def test_the_app_s_serving_room_never_imports_its_panels():
    """app/serving/ is what the panels stand on: it imports nothing of app/panels/, app/page.py or app/wiring.py,
    lazily or not; the panels import nothing of the page or its wiring."""
    upward = [f"{m} ({app_room(m)}) imports {d} ({app_room(d)})" for m, deps in graph().items() if app_room(m)
              for d in deps if app_room(d) and APP_ROOMS[app_room(d)] > APP_ROOMS[app_room(m)]]
    assert not upward, "imports that go up the app's rooms:\n" + "\n".join(sorted(upward))


def test_the_rooms_checker_sees_a_lazy_import_of_a_panel(tmp_path):
    """The walker and the rooms together: a serving module's lazy import of a panel is an upward edge."""
    known = {"app.serving.session": None, "app.panels.round_view.callbacks": None}
    src = tmp_path / "session.py"
    src.write_text("def f():\n    from ..panels.round_view.callbacks import view\n")
    found = imports("app.serving.session", src, known)
    assert found == {"app.panels.round_view.callbacks"}
    assert APP_ROOMS[app_room("app.panels.round_view.callbacks")] > APP_ROOMS[app_room("app.serving.session")]


def test_no_app_module_is_over_400_lines():
    """Small and flat (docs: style, habit 1): a module of the app that grows past MAX_APP_MODULE_LINES is split
    where its concerns part (a panel over it becomes a folder: its layout and events, its callbacks)."""
    long = {str(p.relative_to(ROOT)): n for p in ROOT.glob("app/**/*.py")
            if (n := len(p.read_text().splitlines())) > MAX_APP_MODULE_LINES}
    assert not long, long


def test_the_core_is_exactly_the_engine():
    """`ls lopa/*.py` lists the engine and nothing else; everything on top lives in a subpackage."""
    core = sorted(p.stem for p in (ROOT / "lopa").glob("*.py"))
    assert core == ["__init__", "__main__", "attention", "blocks", "canvas_schema", "chains", "cli", "cost", "dependency",
                    "editing", "engine", "exact", "fast", "filter", "forward", "graphs", "kv", "order", "parquet_trace",
                    "peers", "problems", "read_budget", "records", "resolution", "rules", "schema", "script", "setting",
                    "settings", "trace"]


def test_the_checker_sees_lazy_and_relative_imports(tmp_path):
    """The walker itself: a lazy import inside a function and a relative import are both edges."""
    known = {"lopa.engine": None, "lopa.models": None, "lopa.models.loading": None}
    src = tmp_path / "loading.py"
    src.write_text("def f():\n    from lopa.engine import Decoder\nfrom . import presets\nfrom .loading import x\n")
    found = imports("lopa.models.other", src, known)
    assert found == {"lopa.engine", "lopa.models", "lopa.models.loading"}
