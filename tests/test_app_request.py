"""The app reads a click once (app/serving/request.py): one function turns its raw inputs into a request, whose
unset settings are the ones the visitor did not touch, and one resolution gives the settings every
later step uses (Run, Step, Compare, the share link, the command); the settings title names the
touched settings and resolves nothing."""

import pytest
from tiny import app_model

import lopa.resolution
from app.panels.compare import compare_stream
from app.panels.round_view import callbacks as cb
from app.panels.settings import callbacks as settings_panel
from app.serving.request import read_request
from app.serving.session import APP_DEFAULTS, SETTING_NAMES, SINGLE, Session

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")      # gr.Warning outside a request

PROMPT = "Tom has 3 apples and he buys 4 + 2 apples . how many apples does Tom have ?"
SETTINGS = dict(APP_DEFAULTS, k=2, tau_conf=0.12, block_size=8, max_new_tokens=16)


def values(**changes):
    return [{**SETTINGS, **changes}[n] for n in SETTING_NAMES]


@pytest.fixture(scope="module", autouse=True)
def tiny_model(tmp_path_factory):
    with app_model(tmp_path_factory) as path:
        yield path


@pytest.fixture
def resolutions(monkeypatch):
    """Every resolution made (lopa.resolution.resolution: resolve() and each surface go through it)."""
    made = []
    real = lopa.resolution.resolution

    def counted(*args, **kwargs):
        made.append(args[0] if args else kwargs.get("request"))
        return real(*args, **kwargs)
    monkeypatch.setattr(lopa.resolution, "resolution", counted)
    return made


def test_a_run_click_and_a_step_click_each_resolve_the_request_once(resolutions):
    session = Session(touched=frozenset({"k", "tau_conf", "block_size", "max_new_tokens"}))
    outs = list(cb.run_stream(session, PROMPT, *values(), SINGLE, 2))
    assert outs[-1][0].startswith("Done"), outs[-1][0]
    assert resolutions == [{"k": 2, "tau_conf": 0.12, "block_size": 8, "max_new_tokens": 16}]
    resolutions.clear()
    assert cb.step_once(session, PROMPT, *values(k=1))[0].startswith("Paused")
    assert len(resolutions) == 1
    resolutions.clear()
    last = list(compare_stream(session, PROMPT, "D2F vanilla (k = 0)", *values()))[-1]
    assert last[0].startswith("Done") and len(resolutions) == 1       # the baseline side is not resolved again


def test_unset_means_untouched_and_a_touched_value_equal_to_the_shown_one_is_the_visitor_s():
    shown = values(block_size=24, max_new_tokens=64)
    # Untouched, the length shown is the page's: it follows the touched block size to whole blocks.
    assert read_request(shown, {"block_size"}).settings == {"block_size": 24}
    assert read_request(shown, {"block_size"}).resolve().max_new_tokens == 72
    # Touched, the same 64 is the visitor's, and the run refuses it rather than change it.
    assert read_request(shown, {"block_size", "max_new_tokens"}).settings == {"block_size": 24, "max_new_tokens": 64}
    with pytest.raises(ValueError, match="multiple of block_size"):
        read_request(shown, {"block_size", "max_new_tokens"}).resolve()
    # An input touched and left at the value shown is still set; an untouched one differing from it is not.
    assert read_request(values(k=4, seed=9), {"k"}).settings == {"k": 4}
    # No page (an API client): every input it sends is its own. A bad input is named, touched or not.
    assert read_request(values()).settings == {n: SETTINGS[n] for n in SETTING_NAMES}
    # ... and one it sends as None (or blank: what the API lists as every setting's default) is unset; on the
    # page an emptied box is the visitor's, and named.
    assert read_request(values(k=None, attention=" ")).settings == {n: SETTINGS[n] for n in SETTING_NAMES
                                                                    if n not in ("k", "attention")}
    assert read_request([None] * len(SETTING_NAMES)).settings == {}
    with pytest.raises(ValueError, match="is empty"):
        read_request(values(k=None), {"k"})
    with pytest.raises(ValueError, match="tau_add must be"):
        read_request(values(tau_add="x"), {"k"})


def test_the_settings_title_link_and_command_follow_what_the_visitor_touched(resolutions):
    session = Session()
    assert settings_panel.settings_title(session)["label"].endswith("all at the defaults") and not resolutions
    title, link, command = settings_panel.toucher("k")(None, session, PROMPT, *values(k=4), 0, 0, 0, 0)
    assert session.touched == {"k"} and title["label"].endswith("1 set by you (k)")
    assert len(resolutions) == 3          # the request; the link's and the command's baselines (empty requests)
    assert [r for r in resolutions if r] == [{"k": 4}] and "--k 4" not in command      # lopa generate's k is 4 too
    settings_panel.apply_preset("paper: gsm8k", session)
    assert "k" in session.touched and "tau_conf" in session.touched and "max_new_tokens" not in session.touched
    settings_panel.apply_preset(settings_panel.OWN, session)
    assert session.touched == frozenset()       # the model's own: untouched again
