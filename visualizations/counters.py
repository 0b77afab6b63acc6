"""Live counters (rounds, forwards, token-forwards, tokens, TPF, TPS, wall-clock, elapsed); the comparison of two runs is in compare.py."""

from __future__ import annotations

from lopa.trace import metrics

from .glossary import FEWER_FORWARDS_SLOWER, rule_name, term_link
from .markup import esc
from .palette import STATUS_COLOURS


def counters_html(run, elapsed_s: float, status: str = "running", title: str = "", figures: str = "",
                  replay: str = "", gloss: bool = True) -> str:
    """A row of counters. `elapsed_s` is wall clock since Run was pressed (includes streaming and UI);
    latency is the engine's own sum of round times. Values carry data-* attributes for tests. `figures`
    ("stale" or "drawn"), where given, tells the page whether the run's figures are still to be drawn; `replay`
    (a run id), where given, that the page may ask to see that run's rounds arriving again. `gloss`: the line
    spelling out the labels (off where the page shows it already: the two sides of a comparison)."""
    m = metrics(run)
    boxes = [
        ("rounds", "rounds", f"{m['rounds']}", "model forwards + a possible final no-forward round"),
        ("forwards", "forwards", f"{m['forwards']}", "forward passes; a batched k+1 forward counts once"),
        ("token-forwards", "token-forwards", f"{m['token_forwards']}", "the positions every forward processed, "
         "summed: a batched verify of k + 1 branches over W positions counts (k + 1)·W, the prompt once"),
        ("tokens", "tokens", f"{m['tokens_useful']}", "generated tokens up to and including the first EOS"),
        ("tpf", "TPF", f"{m['tpf_useful']:.2f}", f"ours: useful tokens (to the first EOS) per real forward; the authors' TPF (every appended "
                f"position, EOS padding included, over forwards + 1): {m['tpf_authors']:.2f}"),
        ("tps", "tokens/s", f"{m['tps']:.1f}", f"engine latency only; excluding the first round: {m['tps_excl_first']:.1f}"),
        ("latency", "wall-clock", f"{m['latency_s']:.2f} s", "the engine's own time, the sum of its round times"
         + (f", on {m['device']}" if m["device"] else "")),
        ("ttft", "first token", f"{m['ttft_s']:.2f} s", "time to the first committed token (the prompt round and "
         "the first round that commits)"),
        ("ms-per-forward", "ms/forward", f"{m['ms_per_forward']:.1f}", "engine time per forward: the cost of a round"),
        ("verified", "verified/forward", f"{m['verified_per_forward']:.0f}",
         "window positions verified per forward, all branches together (windows × tokens)"),
        ("elapsed", "elapsed", f"{elapsed_s:.1f} s", "wall clock since the button was pressed"),
    ]
    rule = str((getattr(run, "settings", None) or {}).get("commit", "threshold"))
    if rule != "threshold":    # a peer's rule (or one token a round) decided the commits, not D2F's threshold
        boxes.insert(1, ("commit", "commit rule", rule_name(rule), f"commit = {rule}: what each round commits"))
    if m["device"]:            # what the wall-clock was measured on
        boxes.append(("device", "device", m["device"], "what this run's forwards ran on"))
    model = (getattr(run, "spec", None) or {}).get("name")
    if model:                  # the model this run decoded with (each session picks its own)
        boxes.insert(0, ("model", "model", str(model), "the model this run decoded with"))
    colour = STATUS_COLOURS.get(status, "#666666")
    cells = "".join(
        f'<div class="lopa-counter" data-counter="{key}" data-value="{esc(value)}" title="{esc(tip)}" '
        f'style="padding:4px 10px;border:1px solid #ccc;border-radius:6px;min-width:70px;text-align:center">'
        f'<div style="font-size:11px;color:#555">{label}</div><div style="font-size:18px;font-weight:600">{esc(value)}</div></div>'
        for key, label, value, tip in boxes)
    head = f'<div style="font-weight:600;margin-bottom:2px">{esc(title)}</div>' if title else ""
    badge = (f'<div class="lopa-status" data-status="{esc(status)}" style="align-self:center;padding:2px 8px;'
             f'border-radius:10px;background:{colour};color:#fff;font-size:12px">{esc(status)}</div>')
    # The labels are abbreviations and a phone has no hover: one visible line spells them out.
    gloss = "" if not gloss else (f'<div class="lopa-counters-gloss" style="font-size:12px;color:#555;margin-top:3px">'
             f'{term_link("TPF")} = tokens per forward (answer tokens up to the first {term_link("EOS")}, the '
             f'end-of-sequence token); {term_link("verified/forward")} = positions the model checks per forward, all '
             f'k + 1 branches together; a <a href="#term-forward">forward</a> is one model pass; '
             f'{term_link("token-forwards")} = the positions all forwards processed. {esc(FEWER_FORWARDS_SLOWER)} '
             f'<a href="#glossary">All terms</a></div>')
    marker = (f' data-figures="{esc(figures)}"' if figures else "") + (f' data-replay="{esc(replay)}"' if replay else "")
    return (f'<div class="lopa-counters" data-rounds="{m["rounds"]}" data-status="{esc(status)}"{marker}>{head}'
            f'<div style="display:flex;flex-wrap:wrap;gap:6px">{cells}{badge}</div>{gloss}</div>')
