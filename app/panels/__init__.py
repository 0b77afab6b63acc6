"""What shows: the page's panels, each in one place: its layout (build_<panel>(), placed where app/page.py puts
it), its events (wire(w), which app/wiring.py calls for each panel of PANELS) and its callbacks (plain functions
a test can call). A panel over 400 lines is a folder: its __init__.py holds the layout and the events, its
callbacks.py and what else it needs sit beside. The panels import the serving room (app/serving/), never the
page or its wiring.

    round_view/    the prompt with Run, Step, Stop and Reset, the rounds and their figures (views.py)
    model.py       the session's model
    settings/      the decode settings, presets and backend, and the share link and command they make
    forks.py       what if: a still-masked cell filled first or held back
    best_order.py  the best order found for the run on show, compared with it
    traces.py      the run on show saved as a trace; a trace replayed
    compare.py     two runs compared, or a baseline and LoPA decoded side by side
    studies/       the filling-order studies: shipped results, or a live run
    tour/          arrival and the guided tour
    denoise/       DiffusionGemma on its own sampler
    glossary.py    every term the page uses

and what they share: events.py (the Wiring each wire(w) gets, the concurrency groups), status.py (a problem
said in the status line), viz.py (the figures: the visualizations package).
"""
