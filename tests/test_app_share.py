"""A run as a link and as a command: the query restores exactly the inputs it was made from,
bad or hostile queries change nothing, and the command decodes the same run as the page."""

import shlex

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
    from app.panels.settings import share
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
