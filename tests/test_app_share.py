"""A run as a link and as a command: the query restores exactly the inputs it was made from,
bad or hostile queries change nothing, and the command decodes the same run as the page."""

import shlex

from app.panels.settings import share
from app.panels.settings.share import command_line, restore, share_query
from app.serving.request import read_request
from app.serving.session import APP_DEFAULTS, SETTING_NAMES
from lopa.cli import build_parser
from lopa.resolution import settings_from_args

PROMPT = "Tom has 23 apples & 7 pears. How many?"
CURRENT = ["", *[APP_DEFAULTS[n] for n in SETTING_NAMES]]


def values(**changes):
    fields = {**APP_DEFAULTS, **changes}
    return [fields[n] for n in SETTING_NAMES]


def test_a_link_restores_what_it_was_made_from():
    chosen = values(k=7, tau_conf=0.8, order="random", order_seed=3, attention="full", lookahead_min_prob=0.3)
    from urllib.parse import parse_qsl
    query = dict(parse_qsl(share_query(PROMPT, read_request(chosen).resolve())[1:]))
    assert restore(query, list(CURRENT)) == [PROMPT, *chosen]


def test_bad_or_foreign_query_values_change_nothing():
    assert restore({"k": "lots", "evil": "<script>", "tau_conf": "nan"}, list(CURRENT))[1:] == CURRENT[1:]
    assert restore({"k": "99"}, list(CURRENT)) == CURRENT                      # out of range: the link is ignored
    assert restore({"prompt": "x" * 10_000}, list(CURRENT))[0] == "x" * 4000    # bounded


def test_the_command_line_parses_to_the_same_settings():
    chosen = values(k=3, max_new_tokens=96, order="left_to_right", confidence="max_prob", lookahead_min_prob=0.25)
    argv = shlex.split(command_line(PROMPT, read_request(chosen).resolve()))[3:]             # drop "python -m lopa"
    args = build_parser().parse_args(argv)
    assert args.prompt == PROMPT
    settings = settings_from_args(args)
    assert (settings.k, settings.max_new_tokens, settings.order, settings.confidence,
            settings.lookahead_min_prob) == (3, 96, "left_to_right", "max_prob", 0.25)


class Asked:
    """What gr.Request gives a handler: the headers the browser sent."""

    def __init__(self, **headers):
        self.headers = headers


def test_the_share_link_is_the_pages_own_address_with_the_run_in_its_query():
    from app.serving.session import Session
    panel = [16, 0, 0, 0]                          # the DiffusionGemma panel's inputs, nothing picked for it
    asked = Asked(referer="https://someone-lopa.hf.space/?prompt=old&k=9#top")
    link, _ = share.links(asked, Session(), "Tom has 3 apples.", *values(), *panel)
    assert link.startswith("https://someone-lopa.hf.space/?prompt=Tom+has+3+apples.")
    assert "old" not in link and "#top" not in link
    assert share.links(None, Session(), "Tom has 3 apples.", *values(), *panel)[0].startswith("?prompt=")
    for odd in ("javascript:alert(1)", "", "not a url", "https://x.example/" + "a" * 3000):
        assert share.page_address(Asked(referer=odd)) == ""
    assert share.page_address(Asked()) == "" and share.page_address(None) == ""


# -- links that name a folder this server will not load -------------------------------------------------------
def _bad_folders(root):
    """{case: the link's model= text} for the folders a hostile link may name, under `root` (LOPA_MODEL_DIRS)."""
    import os
    raw = os.fsencode(root)
    loop = root / "loop"
    loop.symlink_to(loop)                                     # a link to itself: resolving it loops
    os.mkdir(raw + b"/bytes\xff")                             # a folder name that is not UTF-8 ...
    (root / "odd").mkdir()                                    # ... and a folder holding such a file
    (root / "odd" / "config.json").write_text("{}")
    with open(raw + b"/odd/w\xff.safetensors", "wb") as f:
        f.write(b"not safetensors")
    return {"long": "a" * 300, "loop": str(loop), "outside": "/usr/share",
            "not utf-8 name": os.fsdecode(raw + b"/bytes\xff"), "not utf-8 file": str(root / "odd")}


class Link:
    def __init__(self, **query):
        self.query_params = query


def test_a_link_naming_a_folder_this_server_will_not_load_says_why_and_run_decodes_with_the_pages_model(
        tmp_path, monkeypatch):
    """Each bad `model=` ends in a sentence (the link's notes), the model box keeps the session's model, and
    Run then decodes with that model: the refused folder never reaches the box, whose event would refuse it
    again while a Run waits (issue 57)."""
    from app.panels import model as model_and_settings
    from app.panels.round_view import callbacks as cb
    from app.serving.model_cache import MODELS
    from app.serving.session import Session
    monkeypatch.setenv("LOPA_MODEL_DIRS", str(tmp_path))
    current = ["", *values()]
    for case, text in _bad_folders(tmp_path).items():
        session = Session()
        out = share.on_load(Link(prompt="Tom has 3 apples. He gets 2 more. How many?", model=text), session, *current)
        box, status = out[len(current)], out[len(current) + 1]
        if case == "not utf-8 file":          # a folder a loader may open: the box's event tries it and says why
            assert box == text and "Dropped" not in str(status)
            status = model_and_settings.pick_model(session, box)[1]
            assert "not a valid safetensors file" in status, case
        else:
            assert box.get("__type__") == "update" and "value" not in box, case     # the box keeps its model
            assert status.startswith("The shared link was read in part. Dropped: model="), case
        status.encode("utf-8")                # a sentence the page can be sent: no codec error in its place
        assert "codec" not in status and "Traceback" not in status, case
        final = list(cb.run_with_stop(session, out[0], *out[1:len(current)]))[-1][0]
        assert final.startswith("Done:"), (case, final)
        assert MODELS.key(MODELS.folder(session.model)) == MODELS.key(MODELS.default), case
        assert session.run.spec["name"] == MODELS.get().spec.name, case


def test_a_link_naming_a_looping_canvas_folder_says_so_and_run_still_decodes(tmp_path, monkeypatch):
    from app.panels.round_view import callbacks as cb
    from app.serving.session import Session
    monkeypatch.setenv("LOPA_MODEL_DIRS", str(tmp_path))
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    session = Session()
    out = share.open_canvas_link(Link(canvas=str(loop)), session)
    assert "a link in it loops" in out[-1] and session.canvas_model is None
    final = list(cb.run_with_stop(session, "Tom has 3 apples.", *values()))[-1][0]
    assert final.startswith("Done:"), final


def test_a_decode_ended_by_another_action_says_so_instead_of_failing():
    """A view event beside the model slot (a trace opened, a run picked) can close the live decode while its
    Run streams: the next chunk ends the Run with a sentence, not AttributeError in the server's log."""
    import pytest

    from app.serving.session import Session
    session = Session()
    with pytest.raises(ValueError, match="press Run to decode again"):
        session.apply({"records": [], "names": [], "finished": False, "tokens": [], "text": ""})


def test_every_message_escapes_a_file_names_undecodable_bytes():
    from visualizations import esc
    assert esc("bad\udcff <b>") == "bad\\udcff &lt;b&gt;"
    assert esc("né") == "né"
