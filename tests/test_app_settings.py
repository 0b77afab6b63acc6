"""The app's surfaces of the settings registry (lopa.settings.SETTINGS): its inputs, presets, share
links and /decode are generated from it, and read every value through it, so a wrong type or an out
of range value gets the registry's one message naming the setting, its range and the value."""

import argparse
import inspect
from urllib.parse import urlencode

import gradio as gr
import pytest
from tiny import app_model, tiny_spec

from app import LAUNCH_KWARGS
from app.panels.settings import build_settings_panel, share
from app.panels.settings import callbacks as settings_panel
from app.serving import api
from app.serving.request import read_request
from app.serving.session import APP_DEFAULTS, SETTING_NAMES, Session
from lopa.cli import build_parser
from lopa.resolution import settings_from_args
from lopa.settings import SETTINGS

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")      # gr.Warning outside a request

CURRENT = ["", *[APP_DEFAULTS[n] for n in SETTING_NAMES]]


# -- parity ------------------------------------------------------------------------------------------
def test_the_app_has_one_input_per_setting_the_registry_shows():
    assert SETTING_NAMES == tuple(n for n, s in SETTINGS.items() if s.app)
    with gr.Blocks():
        panel = build_settings_panel()
    for name in SETTING_NAMES:
        component = panel[name]
        assert component.value == APP_DEFAULTS[name] and component.elem_id == name.replace("_", "-")
        # In words, the code name beside it; the help and the choices as the registry words them (the CLI's too).
        assert component.label == SETTINGS[name].title and name in component.label
        assert component.info == SETTINGS[name].explain()
        if SETTINGS[name].choices:
            assert [c[1] for c in component.choices] == list(SETTINGS[name].choices)
            assert [c[0] for c in component.choices] == [SETTINGS[name].choice_title(c) for c in SETTINGS[name].choices]
        if isinstance(component, gr.Slider):       # its ends as a person reads them, inside the range
            for end in (component.minimum, component.maximum):
                assert len(f"{end}") <= 5 and SETTINGS[name].check(end) == end
    assert read_request([APP_DEFAULTS[n] for n in SETTING_NAMES]).resolve().k == 4


def test_the_settings_panel_lists_every_peer_and_its_knob_through_the_registry():
    """The commit input offers every peer's rule and each peer's own knob is an input, built from its registry
    entry (label, help, range); a request carries them to the settings that run."""
    from lopa.settings import COMMIT_RULES
    knobs = ("eb_gamma", "factor_f", "frechet_margin", "stable_js")
    assert set(knobs) <= set(SETTING_NAMES) and all(SETTINGS[n].app for n in knobs)
    with gr.Blocks():
        panel = build_settings_panel()
    assert [c[1] for c in panel["commit"].choices] == list(COMMIT_RULES)
    for name in knobs:
        assert panel[name].info == SETTINGS[name].explain()
        assert panel[name].value == SETTINGS[name].default == APP_DEFAULTS[name]     # the engine's default
    given = dict(APP_DEFAULTS, commit="frechet", eb_gamma=2.5, factor_f=1.5, frechet_margin=-0.25, stable_js=0.3)
    settings = read_request([given[n] for n in SETTING_NAMES]).resolve()
    assert (settings.commit, settings.eb_gamma, settings.factor_f, settings.frechet_margin, settings.stable_js) == \
        ("frechet", 2.5, 1.5, -0.25, 0.3)
    with pytest.raises(ValueError, match=r"^factor_f must be in \(0, 100\]"):
        read_request([dict(given, factor_f=0)[n] for n in SETTING_NAMES])


def test_share_links_and_decode_cover_every_setting():
    assert share.FIELDS == ("prompt", *SETTING_NAMES)
    params = inspect.signature(api.decode).parameters
    assert list(params) == ["prompt", "model", *SETTINGS]
    for name, spec in SETTINGS.items():      # every setting unset by default: the model's own value, then the app's
        assert params[name].annotation == spec.type | None and params[name].default is None


def test_a_link_restores_every_setting_it_was_made_from():
    changed = dict(APP_DEFAULTS, k=7, commit="top1", branch_score="loo", cache_schedule="authors",
                   mask_argmax="authors", order="adaptive", branch_cost=0.25, lookahead_min_prob=0.3, seed=5)
    values = [changed[n] for n in SETTING_NAMES]
    from urllib.parse import parse_qsl
    query = dict(parse_qsl(share.share_query("a prompt", read_request(values).resolve())[1:]))
    assert share.read_link(query, list(CURRENT)) == (["a prompt", *values], [])


def test_the_app_s_paper_preset_is_the_cli_s():
    """The preset's values over the app's inputs decode what `--preset gsm8k` decodes (the app keeps
    its length: the preset leaves max_new_tokens to the caller, like the CLI)."""
    updates = dict(zip(SETTING_NAMES, settings_panel.apply_preset("paper: gsm8k")))
    values = [u["value"] if isinstance(u, dict) and "value" in u else APP_DEFAULTS[n]
              for n, u in updates.items()]
    app_settings = read_request(values).resolve()
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    args = sub.choices["generate"].parse_args(["--prompt", "x", "--preset", "gsm8k", "--max-new-tokens", "64"])
    assert app_settings == settings_from_args(args, tiny_spec(block_size=32))
    assert (app_settings.cache_schedule, app_settings.mask_argmax) == ("authors", "authors")


# -- ranges: the app's form, links and /decode ----------------------------------------------------------
def test_the_form_names_the_setting_its_range_and_the_value():
    values = dict(APP_DEFAULTS, tau_conf="x")
    with pytest.raises(ValueError, match=r"^tau_conf must be in \(0, 1\] \(a number\), got 'x'$"):
        read_request([values[n] for n in SETTING_NAMES])


def test_a_link_keeps_what_it_can_and_says_what_it_dropped():
    values, notes = share.read_link({"prompt": "keep me", "k": "2", "max_new_tokens": str(10**20)}, list(CURRENT))
    assert values[0] == "keep me" and values[1 + SETTING_NAMES.index("k")] == 2
    assert values[1 + SETTING_NAMES.index("max_new_tokens")] == APP_DEFAULTS["max_new_tokens"]
    assert notes == [f"max_new_tokens must be an integer in 1..8192, got '{10**20}'"]
    values, notes = share.read_link({"block_size": "8", "max_new_tokens": "12"}, list(CURRENT))   # not a multiple
    assert values[1 + SETTING_NAMES.index("block_size")] == 8
    assert values[1 + SETTING_NAMES.index("max_new_tokens")] == APP_DEFAULTS["max_new_tokens"]
    assert len(notes) == 1 and "max_new_tokens=12 dropped" in notes[0] and "multiple of block_size" in notes[0]
    values, notes = share.read_link({"prompt": "y" * 5000, "seed": str(2**70)}, list(CURRENT))
    assert values[0] == "y" * 4000 and values[1:] == CURRENT[1:]
    assert "prompt: cut to its first 4000 characters (of 5000)" in notes and any("seed must be" in n for n in notes)


def test_opening_a_bad_link_says_what_it_dropped():
    class Request:
        query_params = {"prompt": "hi", "tau_conf": "x"}
    session = Session()
    out = share.on_load(Request(), session, *CURRENT)
    # The notes quote the link, so they reach the status escaped (the page shows 'x').
    assert out[0] == "hi" and "Dropped: tau_conf must be in (0, 1] (a number), got &#x27;x&#x27;" in out[-2]
    assert session.touched == frozenset() and out[len(CURRENT)].get("__type__") == "update"   # nothing touched; no model
    assert out[-1] is session          # handed back: Gradio keeps it as the page's (app/page.py)

    class Shared:
        query_params = {"prompt": "hi", "k": "2", "attention": "block_causal", "model": "sure-gsm-dllm"}
    session = Session(touched=frozenset({"seed"}))
    out = share.on_load(Shared(), session, *CURRENT)
    # The link's settings count as the visitor's (they stay when its model is applied), even one that
    # equals what the page showed; its model goes to the model box, which applies it.
    assert session.touched == {"attention", "k", "seed"} and out[len(CURRENT)] == "sure-gsm-dllm"


def test_an_over_long_link_is_cut_before_gradio_sees_it():
    """The middleware answers a 100 KB query with a redirect to a short one; a short query passes."""
    import asyncio
    from urllib.parse import parse_qs, urlsplit

    assert any(m.cls is share.BoundLinkLength for m in LAUNCH_KWARGS["app_kwargs"]["middleware"])
    passed, sent = [], []

    async def page(scope, receive, send):
        passed.append(scope["query_string"])

    async def send(message):
        sent.append(message)

    def call(query: str):
        scope = {"type": "http", "path": "/", "root_path": "", "query_string": query.encode()}
        asyncio.run(share.BoundLinkLength(page)(scope, None, send))

    call(urlencode({"prompt": "z" * 100_000, "k": "2", "evil": "e" * 1000}))
    assert not passed and sent[0]["status"] == 303
    location = dict(sent[0]["headers"])[b"location"].decode()
    query = parse_qs(urlsplit(location).query)
    assert len(location) < share.MAX_QUERY_BYTES and urlsplit(location).path == "/"
    assert query["prompt"] == ["z" * 4000] and query["k"] == ["2"] and "evil" not in query
    assert query[share.CUT_MARK] == ["prompt,evil"]
    values, notes = share.read_link({k: v[0] for k, v in query.items()}, list(CURRENT))
    assert values[0] == "z" * 4000 and values[1 + SETTING_NAMES.index("k")] == 2
    assert "prompt: the link was too long and was cut" in notes
    call("k=2")
    assert passed == [b"k=2"]


def test_the_served_app_opens_a_100_kb_link(bundled_model):
    """Against the real server (http.client: no URL length limit of its own): no HTTP 500."""
    import http.client

    from servers import free_port

    from app import build_demo
    demo, port = build_demo(), free_port()
    demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True, **LAUNCH_KWARGS)
    try:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        connection.request("GET", "/?" + urlencode({"prompt": "z" * 100_000, "max_new_tokens": str(10**20)}))
        response = connection.getresponse()
        assert response.status == 303
        location = response.getheader("location")
        response.read()
        connection.request("GET", location)
        assert connection.getresponse().status == 200
    finally:
        demo.close()


@pytest.fixture(scope="module")
def bundled_model(tmp_path_factory):
    with app_model(tmp_path_factory) as path:
        yield path


@pytest.mark.parametrize("kwargs, message", [
    (dict(prompt="hi", tau_conf="x"), "tau_conf must be in (0, 1] (a number), got 'x'"),
    (dict(prompt="hi", seed=2**70), f"seed must be an integer in 0..4294967295, got {2**70}"),
    (dict(prompt=None), "prompt must be text"),
    (dict(prompt=123), "prompt must be text"),
    (dict(prompt={"a": 1}), "prompt must be text"),
    (dict(prompt=["x"]), "prompt must be text"),
    (dict(prompt="hi", max_new_tokens=10**20), "max_new_tokens must be an integer in 1..8192"),
    (dict(prompt="hi", bogus=1), "unexpected keyword argument 'bogus'"),
])
def test_decode_refuses_bad_values_with_one_message(bundled_model, kwargs, message):
    with pytest.raises(gr.Error) as err:
        api.decode(**kwargs)
    assert message in str(err.value)
