"""What the server keeps on disk for its visitors (app/serving/disk.py): trace exports within a byte budget per
session and for the app, oldest first out, gone when the page closes; uploads deleted once read;
exports served from Gradio's cache without a copy of their own; uploads no load read held within a
budget, together with those still arriving, however they are sent; the app wires it all."""

import asyncio
import os
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import gradio as gr
import httpx
import pytest
from servers import free_port
from tiny import LIVELY, PROMPT, app_model

from app.panels import traces
from app.panels.round_view import callbacks as cb
from app.serving import disk
from app.serving.session import APP_DEFAULTS, SETTING_NAMES, SINGLE, Session

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
SETTINGS = dict(APP_DEFAULTS, k=1, temperature=0.0, seed=0, **LIVELY)


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    with app_model(tmp_path_factory):
        decoded = Session()
        list(cb.run_stream(decoded, PROMPT, *[SETTINGS[n] for n in SETTING_NAMES], SINGLE, 2))
        assert decoded.run is not None
        yield decoded


def visitor(key: str):
    return SimpleNamespace(session_hash=key)


def files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def export(session, key: str, fmt: str = "JSON"):
    update, status = traces.export_trace(session, fmt, visitor(key))
    return (Path(update["value"]) if update.get("value") else None), status


def one_export_size(session, tmp_path, monkeypatch) -> int:
    monkeypatch.setattr(disk, "EXPORTS", disk.Exports(1 << 30, 1 << 30, root=tmp_path / "probe"))
    path, _ = export(session, "probe")
    return path.stat().st_size


def test_twenty_exports_keep_at_most_the_sessions_budget_newest_kept(session, tmp_path, monkeypatch):
    size = one_export_size(session, tmp_path, monkeypatch)
    exports = disk.Exports(int(2.5 * size), 100 * size, root=tmp_path / "cache")
    monkeypatch.setattr(disk, "EXPORTS", exports)
    returned = []
    for _ in range(20):
        path, status = export(session, "a")
        returned.append(path)
    on_disk = files(exports.root)
    assert set(on_disk) == {returned[-2], returned[-1]}            # the two newest, the rest removed
    assert sum(p.stat().st_size for p in on_disk) == exports.held("a") == 2 * size <= exports.session_bytes
    assert "1 older export(s) removed to make room" in status
    assert len(list((exports.root / "a").iterdir())) == 2           # the removed exports' folders went too


def test_all_sessions_together_stay_within_the_apps_budget(session, tmp_path, monkeypatch):
    size = one_export_size(session, tmp_path, monkeypatch)
    exports = disk.Exports(10 * size, int(3.5 * size), root=tmp_path / "cache")
    monkeypatch.setattr(disk, "EXPORTS", exports)
    made = [export(session, key)[0] for key in ("a", "b", "c", "a", "b")]
    assert set(files(exports.root)) == set(made[-3:])                # the oldest of any session went first
    assert exports.held() == 3 * size <= exports.app_bytes


def test_a_closed_page_takes_its_exports_with_it(session, tmp_path, monkeypatch):
    exports = disk.Exports(1 << 30, 1 << 30, root=tmp_path / "cache")
    monkeypatch.setattr(disk, "EXPORTS", exports)
    export(session, "a"), export(session, "a", "Parquet")
    kept, _ = export(session, "b")
    from app.serving.closed_pages import end_page
    asyncio.run(end_page(visitor("a")))              # demo.unload
    assert files(exports.root) == [kept] and not (exports.root / "a").exists()
    assert exports.held("a") == 0 and exports.held() == kept.stat().st_size


def test_an_export_bigger_than_a_sessions_budget_is_refused_and_not_kept(session, tmp_path, monkeypatch):
    size = one_export_size(session, tmp_path, monkeypatch)
    exports = disk.Exports(size // 2, 1 << 30, root=tmp_path / "cache")
    monkeypatch.setattr(disk, "EXPORTS", exports)
    path, status = export(session, "a")
    assert path is None and "could not export the trace" in status and "exports may take" in status
    assert files(exports.root) == [] and exports.held() == 0


def test_exports_are_served_from_gradios_cache_without_a_copy(session, tmp_path, monkeypatch):
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path / "gradio"))
    monkeypatch.setattr(disk, "EXPORTS", disk.Exports(1 << 30, 1 << 30))
    path, _ = export(session, "a")
    assert (tmp_path / "gradio") in path.parents
    with gr.Blocks():
        download = gr.File()
    download.GRADIO_CACHE = str(tmp_path / "gradio")
    assert download.move_resource_to_block_cache(str(path)) == str(path)     # served in place: one copy


def test_an_upload_is_deleted_once_read(session, tmp_path, monkeypatch):
    uploads = tmp_path / "gradio"
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(uploads))
    trace = session.run.save(tmp_path / "trace.json")
    for name, data in (("good.json", trace.read_bytes()), ("bad.json", b"{not json")):
        upload = uploads / f"hash-{name}" / name                       # where Gradio's /upload puts a file
        upload.parent.mkdir(parents=True)
        upload.write_bytes(data)
        other = Session()
        status = traces.load_trace(other, str(upload))[0]
        assert ("Replaying a trace" in status) == (name == "good.json"), status
        assert not upload.exists() and not upload.parent.exists()
    other = Session()
    assert "Replaying a trace" in traces.load_trace(other, str(trace))[0]
    assert trace.exists()                                              # a path outside Gradio's uploads stays


def test_the_app_removes_exports_at_page_close_and_sweeps_gradios_cache():
    from app import build_demo
    from app.serving.closed_pages import end_page
    demo = build_demo()
    assert demo.delete_cache == (disk.CACHE_SWEEP_S, disk.CACHE_AGE_S)
    unloads = [f.fn for f in demo.fns.values() if any(t[1] == "unload" for t in f.targets)]
    assert end_page in unloads                          # which ends the page's exports (disk.end_session) first
    assert callable(demo._queue.clean_events)           # and its jobs, in Gradio's queue (the page's app.get_blocks())
    from app import LAUNCH_KWARGS
    assert disk.BoundUploads in [m.cls for m in LAUNCH_KWARGS["app_kwargs"]["middleware"]]


def test_uploads_no_load_read_are_held_within_their_budget_oldest_leftover_first(tmp_path, monkeypatch):
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path))
    now = 10_000.0
    uploads = set()
    for i, age in enumerate((900, 600, 300, 10)):                  # three leftovers and one just arrived
        path = tmp_path / f"hash{i}" / "trace.json"
        path.parent.mkdir()
        path.write_bytes(b"x" * 400)
        os.utime(path, (now - age, now - age))
        uploads.add(str(path))
    assert disk.make_room_for_upload(uploads, 400, budget=1200, now=now)
    assert sorted(Path(p).parent.name for p in uploads) == ["hash2", "hash3"]     # the two oldest went
    assert not (tmp_path / "hash0").exists() and not (tmp_path / "hash1").exists()
    assert disk.make_room_for_upload(uploads, 800, budget=1200, now=now)          # the last leftover goes
    assert not disk.make_room_for_upload(uploads, 1000, budget=1200, now=now)     # never one just arrived
    assert [Path(p).parent.name for p in uploads] == ["hash3"]


def test_the_upload_route_is_refused_with_a_message_when_there_is_no_room(tmp_path, monkeypatch):
    import asyncio
    monkeypatch.setattr(disk, "UPLOAD_DISK_BYTES", 1000)
    fresh = tmp_path / "hash" / "trace.json"
    fresh.parent.mkdir()
    fresh.write_bytes(b"x" * 900)
    blocks = SimpleNamespace(upload_file_set={str(fresh)})
    passed, sent = [], []

    async def inner(scope, receive, send):
        passed.append(scope["path"])

    async def send(message):
        sent.append(message)

    middleware = disk.BoundUploads(inner)
    for size in (b"100", b"101"):
        scope = {"type": "http", "method": "POST", "path": "/gradio_api/upload",
                 "headers": [(b"content-length", size)], "app": SimpleNamespace(get_blocks=lambda: blocks)}
        asyncio.run(middleware(scope, None, send))
    assert passed == ["/gradio_api/upload"]                                        # 900 + 100 fits, 900 + 101 not
    assert sent[0]["status"] == 507 and b"uploads waiting to be read" in sent[1]["body"]
    assert fresh.exists()


# Uploads to the served app's /upload route, moving a few MB: files of FILE_BYTES against a bound of BOUND.
FILE_BYTES, BOUND, MAX_FILE = 500_000, 1_600_000, 800_000
BOUNDARY = "lopa-upload-test"


@pytest.fixture
def served(tmp_path, monkeypatch):
    """A bare Blocks served on loopback with the app's launch settings (its middleware among them) and a
    per-file cap of MAX_FILE; uploads go to tmp_path/gradio, bound to BOUND bytes."""
    from app import LAUNCH_KWARGS
    folder = tmp_path / "gradio"
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(folder))
    monkeypatch.setattr(disk, "UPLOAD_DISK_BYTES", BOUND)
    with gr.Blocks() as demo:
        gr.File()
    port = free_port()
    demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True,
                **dict(LAUNCH_KWARGS, max_file_size=MAX_FILE))
    try:
        yield SimpleNamespace(url=f"http://127.0.0.1:{port}/gradio_api/upload", folder=folder, blocks=demo)
    finally:
        demo.close()


def multipart(*contents: bytes) -> bytes:
    """A body for Gradio's /upload: one part named `files` per content."""
    parts = [f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="files"; filename="trace{i}.json"\r\n'
             "Content-Type: application/json\r\n\r\n".encode() + content + b"\r\n" for i, content in enumerate(contents)]
    return b"".join(parts) + f"--{BOUNDARY}--\r\n".encode()


def post(url: str, body, length: int | None = None) -> httpx.Response:
    """POST `body` (bytes, or an iterator of them: sent chunked unless `length` is given)."""
    headers = {"content-type": f"multipart/form-data; boundary={BOUNDARY}"}
    if length is not None:
        headers["content-length"] = str(length)
    return httpx.post(url, content=body, headers=headers, timeout=120)


def disk_bytes(folder: Path) -> int:
    """The bytes of the files under `folder`, each file once: Gradio renames an upload from its temporary
    name into a folder of its own while a walk may be under way, and a walk that met it under both names
    counted it twice (seen on a busy machine: 4 files' bytes with 3 on disk); a renamed file keeps its inode."""
    sizes = {}
    for path in folder.rglob("*"):
        try:
            stat = path.stat()
        except OSError:                  # removed while counted
            continue
        if path.is_file():
            sizes[stat.st_ino] = stat.st_size
    return sum(sizes.values())


def settled() -> int:
    """The bytes still reserved for uploads once the server has finished with those answered (it releases
    them just after its answer goes out); a hang guard of 30 s."""
    deadline = time.monotonic() + 30
    while disk.UPLOADS.in_flight and time.monotonic() < deadline:
        time.sleep(0.01)
    return disk.UPLOADS.in_flight


class Peak:
    """The most bytes seen under `folder` while the block runs, looked at every few milliseconds."""

    def __init__(self, folder: Path):
        self.folder, self.most, self._done = folder, 0, threading.Event()

    def __enter__(self):
        def watch():
            while not self._done.wait(0.002):
                self.most = max(self.most, disk_bytes(self.folder))
        self._thread = threading.Thread(target=watch, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._done.set()
        self._thread.join()
        self.most = max(self.most, disk_bytes(self.folder))


def test_parallel_uploads_stay_within_the_bound_together_and_the_rest_are_refused(served):
    bodies = [multipart(os.urandom(FILE_BYTES)) for _ in range(6)]
    halfway = threading.Barrier(len(bodies), timeout=120)    # every upload is under way before any ends
    answers = [None] * len(bodies)

    def upload(i: int) -> None:
        body = bodies[i]

        def halves():
            yield body[:len(body) // 2]
            halfway.wait()
            yield body[len(body) // 2:]
        answers[i] = post(served.url, halves(), length=len(body))

    with Peak(served.folder) as peak:
        threads = [threading.Thread(target=upload, args=(i,)) for i in range(len(bodies))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=180)
    fits = BOUND // len(bodies[0])                                  # 3 of 6
    assert sorted(a.status_code for a in answers) == [200] * fits + [507] * (len(bodies) - fits)
    assert all("uploads waiting to be read" in a.text for a in answers if a.status_code == 507)
    assert peak.most <= BOUND and disk_bytes(served.folder) == fits * FILE_BYTES
    assert settled() == 0


def test_a_chunked_upload_past_the_bound_is_refused_midway_and_leaves_nothing(served):
    body = multipart(*[os.urandom(FILE_BYTES) for _ in range(5)])
    with Peak(served.folder) as peak:
        answer = post(served.url, (body[i:i + (64 << 10)] for i in range(0, len(body), 64 << 10)))
    assert "content-length" not in answer.request.headers
    assert answer.status_code == 507 and "uploads waiting to be read" in answer.text
    assert peak.most <= BOUND and disk_bytes(served.folder) == 0      # Gradio's part-written files went
    assert settled() == 0
    assert post(served.url, multipart(os.urandom(FILE_BYTES))).status_code == 200    # the room came back


def test_an_upload_cut_off_midway_leaves_no_file_behind(served):
    body = multipart(os.urandom(FILE_BYTES))

    def cut_off():
        yield body[:len(body) // 2]
        deadline = time.monotonic() + 60
        while disk_bytes(served.folder) == 0 and time.monotonic() < deadline:    # Gradio is writing it
            time.sleep(0.01)
        raise ConnectionAbortedError("the visitor went away")
    with pytest.raises(ConnectionAbortedError):
        post(served.url, cut_off(), length=len(body))
    assert settled() == 0 and disk_bytes(served.folder) == 0


def test_a_file_over_the_per_file_cap_is_refused_within_the_bound(served):
    answer = post(served.url, iter([multipart(os.urandom(MAX_FILE + 1))]))
    assert answer.status_code == 413 and "maximum allowed size" in answer.text
    assert settled() == 0 and disk_bytes(served.folder) == 0


def test_uploads_read_or_swept_give_their_room_back(served):
    stored = []
    for _ in range(3):
        answer = post(served.url, multipart(os.urandom(FILE_BYTES)))
        assert answer.status_code == 200
        stored += answer.json()
    assert post(served.url, multipart(os.urandom(FILE_BYTES))).status_code == 507
    disk.discard_upload(stored[0])                                     # a load read it
    assert settled() == 0
    assert post(served.url, multipart(os.urandom(FILE_BYTES))).status_code == 200
    os.remove(stored[1])                                               # Gradio's delete_cache swept it
    assert settled() == 0
    assert post(served.url, multipart(os.urandom(FILE_BYTES))).status_code == 200
    assert post(served.url, multipart(os.urandom(FILE_BYTES))).status_code == 507
    assert disk_bytes(served.folder) <= BOUND
