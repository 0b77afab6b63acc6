"""app/serving/frames.py FirstScript: the frame guard is the first thing in the app page's <head>, ahead of Gradio's
module scripts (which take requestAnimationFrame when they load); every other response passes unchanged."""

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import HTMLResponse, JSONResponse, StreamingResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from app.serving.frames import IDLE_FRAMES_JS, FirstScript

PAGE = "<!doctype html><html><head><script type='module' src='/assets/index.js'></script></head><body></body></html>"


async def page(request):
    return HTMLResponse(PAGE)


async def config(request):
    return JSONResponse({"head": "<head>"})


async def chunked(request):
    async def parts():
        yield PAGE[:30]
        yield PAGE[30:]
    return StreamingResponse(parts(), media_type="text/html")


def client():
    app = Starlette(routes=[Route("/", page), Route("/config", config), Route("/other", page)],
                    middleware=[Middleware(FirstScript)])
    return TestClient(app)


def test_the_page_gets_the_guard_first_in_its_head():
    answer = client().get("/")
    assert answer.status_code == 200
    assert answer.text.startswith("<!doctype html><html><head>" + IDLE_FRAMES_JS + "<script type='module'")
    assert int(answer.headers["content-length"]) == len(answer.content)


def test_a_page_sent_in_parts_gets_it_once():
    app = Starlette(routes=[Route("/", chunked)], middleware=[Middleware(FirstScript)])
    answer = TestClient(app).get("/")
    assert answer.text.count(IDLE_FRAMES_JS) == 1 and answer.text.index(IDLE_FRAMES_JS) < answer.text.index("module")


def test_other_responses_pass_unchanged():
    c = client()
    assert c.get("/config").json() == {"head": "<head>"}
    assert c.get("/other").text == PAGE
    assert c.post("/").status_code == 405
