"""What the server keeps on disk for its visitors (app/disk.py): trace exports within a byte budget per
session and for the app, oldest first out, gone when the page closes; uploads deleted once read;
exports served from Gradio's cache without a copy of their own; uploads no load read held within a
budget; the app wires it all."""

import os
from pathlib import Path
from types import SimpleNamespace

import gradio as gr
import pytest
from tiny import LIVELY, PROMPT, app_model

from app import callbacks as cb
from app import disk, traces
from app.session import APP_DEFAULTS, SETTING_NAMES, SINGLE, Session

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
    disk.end_session(visitor("a"))
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
    demo = build_demo()
    assert demo.delete_cache == (disk.CACHE_SWEEP_S, disk.CACHE_AGE_S)
    unloads = [f.fn for f in demo.fns.values() if any(t[1] == "unload" for t in f.targets)]
    assert disk.end_session in unloads
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
