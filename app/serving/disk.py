"""What the server may keep on disk for its visitors: trace exports within a byte budget, uploads not at all.

Exports are written straight into Gradio's cache folder (lopa-exports/<session>/ under it), which Gradio
serves as they are, without a copy of its own. Each is charged its bytes: one session keeps at most
SESSION_DISK_BYTES (its own oldest exports go first to make room), all sessions together DISK_BUDGET_BYTES
(then the oldest exports of any session go first), and one bigger than a session's budget is refused. A
session's exports are removed when its page closes (`end_session`, called by app.serving.closed_pages.end_page on demo.unload). An uploaded trace
is deleted as soon as it was read (`discard_upload`): the run lives in the session's memory, bounded by
app/serving/budget.py. An upload that no load ever read (a POST to /upload alone) stays in Gradio's cache until its
delete_cache (CACHE_SWEEP_S, CACHE_AGE_S) sweeps it. `BoundUploads` holds those stored and those on their way
in within UPLOAD_DISK_BYTES together, at every moment: each upload reserves its bytes (UPLOADS, under one lock)
before Gradio writes them, its Content-Length up front or, without one, as the bytes arrive, removing the
oldest leftovers to make room; one that does not fit is refused with HTTP 507, midway if need be, and leaves
no file behind.

    LOPA_SESSION_DISK_MB   exports one session keeps (default 128)
    LOPA_APP_DISK_MB       exports all sessions keep together (default 1024)
    LOPA_UPLOAD_DISK_MB    uploads waiting in Gradio's cache, all visitors together (default 1024)
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import threading
import time
from collections import OrderedDict
from pathlib import Path

import gradio as gr
from gradio.utils import get_upload_folder
from starlette.formparsers import MultiPartException

from .budget import mb

SESSION_DISK_BYTES = int(os.environ.get("LOPA_SESSION_DISK_MB", "128")) << 20
DISK_BUDGET_BYTES = int(os.environ.get("LOPA_APP_DISK_MB", "1024")) << 20
CACHE_SWEEP_S, CACHE_AGE_S = 600, 3600     # gr.Blocks(delete_cache=...): every 10 min, files older than 1 h
LOCAL = "local"                            # the session key of a call without a browser session (tests, scripts)
UPLOAD_DISK_BYTES = int(os.environ.get("LOPA_UPLOAD_DISK_MB", "1024")) << 20
STALE_UPLOAD_S = 120                       # a load reads its upload as it arrives: an older one is a leftover
RESERVE_STEP = 1 << 20                     # a body of unknown length reserves this far ahead: one look at the folder a MB


def session_key(request) -> str:
    """A folder name for the browser session of `request` (a gr.Request, or None)."""
    key = str(getattr(request, "session_hash", None) or LOCAL)
    return re.sub(r"[^A-Za-z0-9_-]", "_", key)[:64]


class Exports:
    """The export files of every session, oldest first, and their bytes (thread-safe: Gradio runs the
    callbacks of different sessions on different threads). `root` None: Gradio's cache folder, read at
    each use (GRADIO_TEMP_DIR may be set after import)."""

    def __init__(self, session_bytes: int, app_bytes: int, root: Path | None = None):
        self.session_bytes, self.app_bytes, self._root = session_bytes, app_bytes, root
        self._files: OrderedDict[Path, tuple[str, int]] = OrderedDict()     # path -> (session key, bytes)
        self._lock = threading.Lock()

    @property
    def root(self) -> Path:
        return Path(self._root if self._root is not None else get_upload_folder()) / "lopa-exports"

    def folder(self, key: str) -> Path:
        """A new folder of its own for one export of session `key` (two exports never share a name)."""
        parent = self.root / key
        parent.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(dir=parent))

    def held(self, key: str | None = None) -> int:
        with self._lock:
            return sum(n for k, n in self._files.values() if key is None or k == key)

    def add(self, key: str, path: Path) -> int:
        """Charge the export just written at `path` to session `key`, removing the oldest exports it needs
        room for; returns how many were removed. ValueError (and the file removed) when it is bigger than
        a session may keep."""
        path, size = Path(path), Path(path).stat().st_size
        if size > self.session_bytes:
            _remove(path)
            raise ValueError(f"this trace takes {mb(size)} as a file and a visitor's exports may take "
                             f"{mb(self.session_bytes)}: export a shorter run")
        with self._lock:
            for gone in [p for p in self._files if not p.exists()]:    # swept by Gradio's delete_cache
                del self._files[gone]
            removed = 0
            own = sum(n for k, n in self._files.values() if k == key)
            for old in [p for p, (k, _) in self._files.items() if k == key]:
                if own + size <= self.session_bytes:
                    break
                own -= self._files.pop(old)[1]
                _remove(old)
                removed += 1
            total = sum(n for _, n in self._files.values())
            for old in list(self._files):
                if total + size <= self.app_bytes:
                    break
                total -= self._files.pop(old)[1]
                _remove(old)
                removed += 1
            self._files[path] = (key, size)
        return removed

    def end_session(self, key: str) -> None:
        """Remove every export of session `key`, and its folder."""
        with self._lock:
            for path in [p for p, (k, _) in self._files.items() if k == key]:
                del self._files[path]
                _remove(path)
        shutil.rmtree(self.root / key, ignore_errors=True)


def export(request, stem: str, model, suffix: str, write) -> tuple[Path, int]:
    """One export of `request`'s session (a gr.Request, or None): `write(path)` at a fresh path called
    `<stem>-<model>-<time><suffix>` (`model` made a file name: it may come from an uploaded trace), then
    charged to the disk budgets (Exports.add). Returns (path, how many older exports were removed to make
    room); on OSError or ValueError (over a session's budget) the file is removed and the error raised."""
    key = session_key(request)
    model = re.sub(r"[^A-Za-z0-9._-]+", "_", str(model or "model"))[:64]
    path = EXPORTS.folder(key) / f"{stem}-{model}-{time.strftime('%Y%m%d-%H%M%S')}{suffix}"
    try:
        write(path)
        return path, EXPORTS.add(key, path)
    except (OSError, ValueError):
        discard_export(path)
        raise


def discard_export(path: Path) -> None:
    """An export that failed before it was charged, and the folder made for it."""
    _remove(Path(path))


def _remove(path: Path) -> None:
    """An export and the folder made for it."""
    path.unlink(missing_ok=True)
    try:
        path.parent.rmdir()
    except OSError:
        pass


EXPORTS = Exports(SESSION_DISK_BYTES, DISK_BUDGET_BYTES)


def end_session(request: gr.Request = None) -> None:
    """The closed page's exports go (app.serving.closed_pages.end_page, on demo.unload, passes the ending session's request)."""
    EXPORTS.end_session(session_key(request))


def discard_upload(path) -> None:
    """Delete an uploaded file once it was read, with the folder Gradio made for it, if it lies in Gradio's
    upload folder (a path given by a script elsewhere is the caller's own and stays)."""
    if not path:
        return
    path, uploads = Path(str(path)).resolve(), Path(get_upload_folder()).resolve()
    if uploads not in path.parents or EXPORTS.root.resolve() in path.parents or not path.is_file():
        return
    path.unlink(missing_ok=True)
    if path.parent != uploads:
        try:
            path.parent.rmdir()
        except OSError:
            pass


def make_room_for_upload(uploads: set, nbytes: int, budget: int | None = None, now: float | None = None) -> bool:
    """Whether an upload of `nbytes` fits with the files of `uploads` (Gradio's set of uploaded paths) within
    `budget`, once the oldest leftovers (older than STALE_UPLOAD_S) are removed to make room; a fresh one is
    never removed (a load may be reading it). `budget` None: UPLOAD_DISK_BYTES."""
    budget = UPLOAD_DISK_BYTES if budget is None else budget
    now = time.time() if now is None else now
    present = []
    for name in list(uploads):
        try:
            present.append((os.stat(name).st_mtime, os.stat(name).st_size, name))
        except OSError:
            uploads.discard(name)                  # read and deleted (discard_upload), or swept
    held = sum(size for _, size, _ in present)
    for mtime, size, name in sorted(present):
        if held + nbytes <= budget or now - mtime < STALE_UPLOAD_S:
            break
        discard_upload(name)
        uploads.discard(name)
        held -= size
    return held + nbytes <= budget


class UploadRefused(MultiPartException):
    """Raised from an upload's `receive` to stop it midway. Gradio's multipart parser (gradio.route_utils.
    GradioMultiPartParser.parse) removes the files it was writing on a MultiPartException and answers with its
    message; any other exception there (Starlette's ClientDisconnect included) leaves them in its upload folder."""


class UploadLedger:
    """The bytes of the uploads on their way in, held with those stored and waiting in Gradio's cache within
    UPLOAD_DISK_BYTES. The stored ones are read from disk at each reservation (make_room_for_upload), so a
    load's discard_upload or Gradio's sweep gives their bytes back by deleting the file. One lock: no two
    reservations see the same room."""

    def __init__(self):
        self.in_flight = 0
        self._lock = threading.Lock()

    def reserve(self, uploads: set, nbytes: int) -> bool:
        """Take `nbytes` more for an upload on its way in if they fit beside the stored files of `uploads`
        (Gradio's set; its oldest leftovers are removed to make room) and the other uploads in flight;
        False, and nothing taken, if not."""
        with self._lock:
            if not make_room_for_upload(uploads, nbytes, UPLOAD_DISK_BYTES - self.in_flight):
                return False
            self.in_flight += nbytes
            return True

    def release(self, nbytes: int) -> None:
        """An upload ended: stored, its file now counts from disk (counted twice for a moment, never not at
        all), or refused and removed."""
        with self._lock:
            self.in_flight -= nbytes


UPLOADS = UploadLedger()


class BoundUploads:
    """ASGI middleware: an upload's bytes are reserved in UPLOADS before Gradio may write them, so uploads
    on their way in and those waiting in its cache stay within UPLOAD_DISK_BYTES together, however many
    arrive at once and however they are sent. A declared Content-Length is reserved before the body is read;
    the bytes that arrive are counted (`receive`), and a body without one, or longer than it said, reserves
    as it streams (RESERVE_STEP ahead). An upload that does not fit is refused with HTTP 507 and a message:
    before its body when its length is known, midway otherwise (UploadRefused: Gradio removes what it had
    written). A client that goes away midway is stopped the same way, leaving no file behind. Gradio's
    max_file_size still bounds each file."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope.get("type") != "http" or scope.get("method") != "POST" or not scope.get("path", "").endswith(
                "/upload") or scope.get("app") is None or not hasattr(scope["app"], "get_blocks"):
            return await self.app(scope, receive, send)
        uploads = scope["app"].get_blocks().upload_file_set
        headers = dict(scope.get("headers") or [])
        try:
            declared = max(0, int(headers.get(b"content-length", b"0")))
        except ValueError:
            declared = 0
        if not UPLOADS.reserve(uploads, declared):
            return await _refuse_upload(send)
        reserved, received, complete, refused, answered = declared, 0, False, False, False

        async def counted_receive():
            nonlocal reserved, received, complete, refused
            message = await receive()
            if message["type"] == "http.disconnect" and not complete:
                raise UploadRefused("the upload was cut off before it arrived")
            received += len(message.get("body", b""))
            complete = complete or not message.get("more_body", False)
            if received > reserved:
                for more in (max(received - reserved, RESERVE_STEP), received - reserved):
                    if UPLOADS.reserve(uploads, more):
                        reserved += more
                        break
                else:
                    refused = True
                    raise UploadRefused(_upload_refusal())
            return message

        async def answer(message):
            nonlocal answered
            if not refused:
                return await send(message)
            if message["type"] == "http.response.start" and not answered:    # Gradio's 400: ours instead
                answered = True
                await _refuse_upload(send)

        try:
            await self.app(scope, counted_receive, answer)
        except UploadRefused:        # it got past Gradio's parser (a client gone, or not Gradio's route)
            if refused and not answered:
                await _refuse_upload(send)
        finally:
            UPLOADS.release(reserved)


def _upload_refusal() -> str:
    return (f"the server holds up to {mb(UPLOAD_DISK_BYTES)} of uploads waiting to be read, for all visitors: "
            "try again in a few minutes")


async def _refuse_upload(send) -> None:
    body = _upload_refusal().encode()
    await send({"type": "http.response.start", "status": 507,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
