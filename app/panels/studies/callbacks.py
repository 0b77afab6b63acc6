"""The Studies section: the filling-order studies of lopa.study marked `app`, shown from the results the
command line shipped for the model on show (assets/studies/<model folder name>/, loaded instantly), or
run live on a few problems with a progress bar and Stop. Plain callbacks; the panel's layout and events are
in __init__.py."""

from __future__ import annotations

import inspect
import os
import shlex
import time
from contextlib import closing
from functools import cache
from pathlib import Path

import gradio as gr

import lopa.study
from lopa.models.loading import ROOT
from lopa.resolution import resolve
from lopa.study.common import DEFAULT_SEED, STUDIES_DIR, load_results, weights_digest
from lopa.study.figures import shipped_title
from lopa.trace import pooled

from ...serving import boundary
from ...serving.inputs import choice, whole
from ...serving.model_cache import MODELS
from ..status import error_message, stop_pending
from ..viz import FEWER_FORWARDS_SLOWER, esc

# Shipped results live per model: STUDIES_ROOT/<model folder name>/<study>.*, written by
# `python -m lopa.study <study> --model assets/models/<name> --out assets/studies/<name>`.
# LOPA_STUDIES_DIR moves the root (tests point it, or this attribute, at a fixture).
STUDIES_ROOT = Path(os.environ.get("LOPA_STUDIES_DIR") or STUDIES_DIR)
# The shipped results show as their PNG (an image costs the page nothing when other outputs update;
# a large plotly figure in the page made every streamed update of the round view relayout it), the
# interactive plot on request and after a live run.
STUDY_OUTPUTS = ("study_status", "study_progress", "study_plot", "study_image", "study_summary")
# What the studies' reports abbreviate, in words (the page's glossary has them too).
REPORT_TERMS = ("TPF = tokens per forward; AFP = average finalization parallelism (tokens over the rounds that "
                "committed any); tau(LTR) = Kendall's tau of the fill order against left to right (1: strictly left "
                "to right); AUP = accuracy under parallelism. [All terms](#glossary)")
LIVE_PROBLEMS = (1, 10)      # live runs stay small: this is a shared CPU (each study's knobs: their `live` range)
LIVE_K = 4
# A status alone (the headroom search reports every rollout, tens a second on a fast machine) reaches the
# page at most this often; one that waits goes with the next decode's progress. Every status re-renders
# the section, and a page redrawing that often answers a click (Stop) late on a busy or small device.
STATUS_EVERY_S = 0.25


def app_studies() -> tuple[str, ...]:
    """The studies the app shows, as lopa.study finds their declarations (`app=True`), in their rank order."""
    return lopa.study.APP_STUDIES


def declared(study: str):
    """The declaration of `study` (lopa.study.declaration.Study)."""
    return lopa.study.STUDIES[study]


def titles() -> dict[str, str]:
    """{name: title} of the app's studies, numbered as the app lists them (docs/studies.md numbers its
    sections its own way: it has studies the app does not show)."""
    return {name: f"{i}. {declared(name).title}" for i, name in enumerate(app_studies(), 1)}


def study_choices() -> list[tuple[str, str]]:
    """The study dropdown's (title, name) choices (build_studies_panel)."""
    return [(title, name) for name, title in titles().items()]


def live_knobs() -> dict[str, tuple]:
    """{knob name: (Knob, the app's studies that take it)}: the live run's inputs beside problems and seed, one
    per knob name over every app study's declared live knobs (the first declaration gives its range and words)."""
    knobs: dict[str, tuple] = {}
    for name in app_studies():
        for knob in declared(name).live_knobs:
            knobs[knob.name] = (knobs.get(knob.name, (knob, ()))[0], knobs.get(knob.name, (knob, ()))[1] + (name,))
    return knobs


def knob_keys() -> list[str]:
    """The panel's keys of the live knobs' inputs, in run_study's order (the panel's wire passes them)."""
    return [f"study_{name}" for name in live_knobs()]


def run_signature() -> inspect.Signature:
    """run_study's parameters: the session's state, the study, problems, each live knob (live_knobs(), its
    live default), the problem seed and the session. Gradio names the API's parameters from it."""
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    return inspect.Signature([inspect.Parameter(name, kind) for name in ("state", "study", "n_problems")]
                             + [inspect.Parameter(name, kind, default=knob.live[2]) for name, (knob, _) in live_knobs().items()]
                             + [inspect.Parameter("seed", kind, default=DEFAULT_SEED),
                                inspect.Parameter("session", kind, default=None)])


def new_study_state() -> dict:
    """Per browser session: the Stop flag of a live study. "armed": Run was pressed and its run has not
    started yet (it may wait in the model's queue); a Stop pressed then is kept for it."""
    return {"stop": False, "running": False, "armed": False}


def arm_study(state: dict) -> None:
    """Run's first step, outside the queue: from now on Stop reaches this run, even before it starts."""
    state["stop"], state["armed"] = False, True


def figure(study: str, tables: dict, summary: dict, title: str):
    return declared(study).load().figure(tables, summary, title)


def report(study: str, summary: dict) -> str:
    return "```\n" + declared(study).load().report(summary) + "\n```\n\n" + REPORT_TERMS


def shown_command(command: str) -> str:
    """A study's command as the page shows it: without --hardware-note and its value (a note for the
    results file, said in words beside the command already)."""
    try:
        words = shlex.split(command)
    except ValueError:
        return command
    kept = [w for i, w in enumerate(words) if w != "--hardware-note" and (i == 0 or words[i - 1] != "--hardware-note")]
    return shlex.join(w for w in kept if not w.startswith("--hardware-note="))


def _progress(done: int, total: int, what: str = "", units: str = "decodes", rows=()) -> str:
    return (f'<div class="lopa-study-progress"><progress value="{done}" max="{max(total, 1)}" style="width:100%">'
            f'</progress><div style="font-size:12px">{done} / {total} {esc(units)} {esc(what)}</div>'
            f'{cost_table(rows)}</div>')


# What names a decoder in a study's rows: the fields its rows carry among these (lopa/study: orders has
# `order`, calibration `metric` and `rule`, adaptive and headroom `config`).
DECODER_FIELDS = ("config", "order", "metric", "rule")


def cost_table(rows) -> str:
    """The live run's decodes so far, per decoder (DECODER_FIELDS), pooled by lopa.trace.pooled: TPF beside what
    it leaves out, forwards, token-forwards and wall-clock per decode, and tokens/s. "" before the first decode."""
    groups: dict[str, list] = {}
    # Rows of several k (frontier: every rule at k = 0 and with lookahead) are told apart by their k, never pooled.
    split_k = len({row["k"] for row in rows if "k" in row}) > 1
    for row in rows:
        name = " / ".join(str(row[f]) for f in DECODER_FIELDS if f in row) or "all"
        if split_k and "k" in row and f"k{row['k']}" not in name:
            name += f", k = {row['k']}"
        groups.setdefault(name, []).append(row)
    if not groups:
        return ""
    cells = "".join(
        f'<tr data-decoder="{esc(name)}"><td>{esc(name)}</td><td>{m["runs"]}</td><td>{m["tpf_useful"]:.2f}</td>'
        f'<td>{m["forwards_mean"]:.1f}</td><td>{m["token_forwards_mean"]:.0f}</td>'
        f'<td>{m["latency_s_mean"]:.2f}</td><td>{m["tps"]:.1f}</td></tr>'
        for name, m in ((name, pooled(group, tokens="tokens")) for name, group in groups.items()))
    head = ("<tr><th>decoder</th><th>decodes</th><th>TPF</th><th>forwards / decode</th>"
            "<th>token-forwards / decode</th><th>wall-clock / decode (s)</th><th>tokens/s</th></tr>")
    return (f'<table class="lopa-study-cost" style="font-size:12px;margin-top:4px">{head}{cells}</table>'
            f'<div style="font-size:12px;color:#555">{esc(FEWER_FORWARDS_SLOWER)}</div>')


def shown_model(session=None) -> Path:
    """The model whose shipped results the section shows: the session's (app.serving.session.Session.model), else
    the default one."""
    model = getattr(session, "model", None)
    return Path(model) if model else MODELS.default


def results_dir(model: Path) -> Path:
    """Where the shipped results of `model` (a model folder) live."""
    return STUDIES_ROOT / Path(model).name


def _repo_path(path: Path) -> str:
    path = Path(path)
    return str(path.relative_to(ROOT)) if path.is_absolute() and path.is_relative_to(ROOT) else str(path)


def show_shipped(study: str, session=None, interactive: bool = False) -> tuple:
    """STUDY_OUTPUTS for the results shipped for the session's model (shown_model()): their PNG, or with
    `interactive` the plotly figure made from the shipped tables; a message saying how to make them
    where that model has none."""
    try:
        choice("study", study, app_studies())
    except ValueError as err:
        return (error_message(err),) + (gr.skip(),) * 4
    model = shown_model(session)
    folder = results_dir(model)
    shipped = load_results(study, folder)
    if shipped is None:
        command = (f"python -m lopa.study {study} --model {_repo_path(model)} --out {_repo_path(folder)}")
        return (f"No shipped results for **{esc(model.name)}** yet: run it live below, or with "
                f"<code>{esc(command)}</code>." + elsewhere(study, model), "", None, _image(None), "")
    tables, meta = shipped
    status = (f"**Shipped results** of <code>{esc(shown_command(meta.get('command', '')))}</code> on {esc(meta.get('model', ''))}"
              f" (weights {esc(meta.get('weights_sha256', '?'))})"
              f" — {esc(meta.get('hardware', ''))}, {esc(meta.get('date', ''))}; "
              f"{esc(meta.get('data', ''))}." + stale_note(meta, model) + elsewhere(study, model))
    title = shipped_title(study, meta)
    if interactive:
        return status, "", figure(study, tables, meta["summary"], title), _image(None), report(study, meta["summary"])
    png = folder / declared(study).file("png")
    return status, "", None, _image(str(png) if png.is_file() else None), report(study, meta["summary"])


@cache
def _digest(model_dir: str) -> str:
    return weights_digest(model_dir)     # hashed once per folder and server: its weights do not change under it


def stale_note(meta: dict, model: Path) -> str:
    """Say so when shipped results were recorded on other weights than `model`'s today."""
    current = _digest(str(model))
    if meta.get("weights_sha256") == current:
        return ""
    return (f" **These are not {esc(Path(model).name)}'s current weights ({current})**: the numbers describe an "
            f"earlier model. Run live, or rerun the command, for this one.")


def elsewhere(study: str, model: Path) -> str:
    """One line naming the other models with shipped results of `study` (pick one to see them)."""
    meta = declared(study).file("json")
    others = sorted(p.parent.name for p in STUDIES_ROOT.glob(f"*/{meta}") if p.parent.name != Path(model).name) \
        if STUDIES_ROOT.is_dir() else []
    if not others:
        return ""
    return ("\n\nShipped for " + ", ".join(f"**{esc(name)}**" for name in others)
            + " too: pick that model above to see its results.")


def show_interactive(study: str, session=None) -> tuple:
    """STUDY_OUTPUTS with the shipped results as an interactive plot."""
    return show_shipped(study, session, interactive=True)


def _image(path):
    return gr.update(value=path, visible=path is not None)


def run_study(*args, **kwargs):
    """run_study(state, study, n_problems, <each live knob>, seed, session) (run_signature()): run a study live
    on a few fresh synthetic problems with the session's model; yield STUDY_OUTPUTS after every decode and
    the study's plot and numbers at the end (or when Stop is pressed: the problems done so far). The
    decodes run behind the GPU boundary (app/serving/boundary.py), given the study's own knobs; the tables,
    summary and plot are made here."""
    given = run_signature().bind(*args, **kwargs)
    given.apply_defaults()
    state, study, session = given.arguments["state"], given.arguments["study"], given.arguments["session"]
    yield from _run(state, study, given.arguments["n_problems"], given.arguments["seed"], session,
                    {name: given.arguments[name] for name in live_knobs()})


run_study.__signature__ = run_signature()       # what Gradio reads (the API's parameter names)


def _run(state: dict, study: str, n_problems, seed, session, knobs: dict):
    if not state.get("armed"):          # called without Run's first step (the API): no Stop is pending
        state["stop"] = False
    state["armed"], state["running"] = False, True
    try:
        choice("study", study, app_studies())
        # Live studies stay small on a shared CPU (LIVE_PROBLEMS, each knob's declared live range).
        n = whole("problems", n_problems, *LIVE_PROBLEMS)
        values = {name: whole(knob.words, knobs[name], *knob.live[:2]) for name, (knob, _) in live_knobs().items()}
        seed = whole("problem seed", seed, 0, 2**31 - 1)
        units = declared(study).units
        folder = MODELS.folder(getattr(session, "model", None))
        loaded = MODELS.get(folder)     # its spec, in the server process
        rows, rounds, total, noted, where = [], [], 0, {}, "fresh problems"
        done, complete = 0, set()       # units of work done (the study's count: every decode it runs); complete problems
        shown, waiting = 0.0, gr.skip()     # when a status alone last reached the page; the status held back since
        with closing(boundary.study_steps_on_gpu(study, n, seed, values, _base(loaded).to_dict(),
                                                 str(folder))) as steps:
            # Stop is read after every step (a decode, or a status between them: a long search reports
            # each of its rollouts), so a run stops within one decode of the press.
            for step in steps:
                if "where" in step:
                    where = step["where"]
                    yield f"Running **{titles()[study]}** on {n} {where}…", _progress(0, 1), gr.skip(), gr.skip(), \
                        gr.skip()
                elif "status" in step:
                    done, total = step.get("done", done), step.get("total", total)
                    waiting = step["status"]
                    if time.monotonic() - shown >= STATUS_EVERY_S:
                        shown = time.monotonic()
                        yield waiting, _progress(done, max(total, 1), _estimate(step), units, rows), gr.skip(), \
                            gr.skip(), gr.skip()
                        waiting = gr.skip()
                elif "summary" in step:
                    noted.update(step["summary"])
                else:
                    total = step["total"]
                    rows.append(step["row"])
                    rounds += step["rounds"]
                    done = step.get("done", len(rows))
                    complete.update([step["complete"]] if "complete" in step else [])
                    yield waiting, _progress(done, total, _estimate(step), units, rows), gr.skip(), gr.skip(), \
                        gr.skip()
                    shown, waiting = 0.0, gr.skip()       # the first status after a decode shows at once
                if state["stop"]:
                    break
        if not rows:
            yield (f"Stopped before the first decode of **{titles()[study]}** finished: nothing to show."
                   if state["stop"] else "The study made no decodes."), "", gr.skip(), gr.skip(), gr.skip()
            return
        # The numbers, the plot and its title describe the same complete problems: a stopped run's last,
        # unfinished problem is left out of all three.
        if not complete:
            yield (f"Stopped before the first problem of **{titles()[study]}** was complete ({done} of {total} decodes "
                   "ran): nothing to summarize yet."), _progress(done, total, units=units, rows=rows), gr.skip(), gr.skip(), ""
            return
        rows = [r for r in rows if r["problem"] in complete]
        summary, tables = declared(study).load().live_summary(rows, [r for r in rounds if r.get("problem") in complete])
        summary.update(noted)
        stopped = (f" (stopped: the {len(complete)} complete problem{'s' * (len(complete) != 1)})"
                   if state["stop"] else "")
        make = figure(study, tables, summary, f"live: {loaded.spec.name}, {len(complete)} problem{'s' * (len(complete) != 1)}")
        yield (f"Done{stopped}: **{titles()[study]}** on {where}. The same command with more problems: "
               f"`python -m lopa.study {study} --n 40`."), _progress(done, total, units=units, rows=rows), make, \
            _image(None), \
            report(study, summary)
    except ValueError as err:
        yield error_message(err), "", gr.skip(), gr.skip(), gr.skip()
    finally:
        state["running"] = False


def _estimate(step: dict) -> str:
    """What the progress line adds while a study's total is an estimate (the headroom search's rollouts are
    known a round at a time)."""
    return "(the total is an estimate until the last search ends)" if step.get("estimate") else ""


def _base(loaded):
    """A live study's settings on the loaded model: the one resolution of no request over the model's
    own values (its attention, block size, fitted budget) and the live run's k and length."""
    return resolve({}, loaded.spec, defaults={"k": LIVE_K, "max_new_tokens": 128})


def stop_study(state: dict):
    """Ask a live study, running or armed, to stop after its current step (stop_pending(): the study says
    so), or say that nothing runs."""
    if state.get("running") or state.get("armed"):
        state["stop"] = True
        return stop_pending()
    return "Nothing is running."
