"""What serves: the app's machinery, under the panels (app/panels/ imports it; it never imports them, lazily
or not: tests/test_layers.py).

    session.py, runs.py        a visitor's session (plain data only) and its run list
    inputs.py, request.py      a click's inputs read, and the one resolution of a request into settings
    models.py, model_cache.py  the models a session may pick, and the one bounded cache of loaded models
    boundary.py, gpu.py        every call that runs the model, as plain values; ZeroGPU's decorator
    decode_pool.py             the decode workers (each `python -m app.serving.decode_worker`)
    give_way.py                the long jobs wait between their decodes for the visitors' decodes
    budget.py, disk.py         the memory of loaded traces; the disk of exports and uploads
    examples.py                the example prompts and their reference answers
    api.py                     the typed /decode endpoint

and the workarounds for Gradio 6.31's own behaviour, a module each, whose docstring says which:

    updates.py       every output sent as gr.update (the session's copies of components grew)
    progress.py      an event with hidden progress names no progress target (the page's loading states)
    queue.py         the queue's polling when it has nothing to do
    frames.py        an idle page's frames (a status tracker's orphaned loop)
    scheme.py        the page's light colours whatever the system prefers
    blocks.py        the page's gr.Blocks: an upload's message, the API's unset defaults
    closed_pages.py  a closed page gives back its States and Gradio's record of it at once
"""
