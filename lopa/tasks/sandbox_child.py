"""What runs inside the code sandbox (lopa.tasks.sandbox): standard library only, started as a
script in each of the two sandboxed processes, never imported by the grader.

    python -I -B child.py candidate PROGRAM RUN_NAME REQUESTS_FD REPLIES_FD CPU_S MEMORY_B FILE_B GUARD_DIR MAX_NAMES
    python -I -B child.py test      PROGRAM RUN_NAME REQUESTS_FD REPLIES_FD CPU_S MEMORY_B FILE_B RESULT_FD

The candidate side runs the untrusted code, then answers calls on its names. The test side runs the
tests with every name they do not define standing for the candidate's, sends each use of one as a
request and rebuilds the answer from plain data; it alone holds the pipe the verdict goes back on.
Nothing the candidate sends is code: values cross as tagged JSON (numbers, strings, bytes, lists,
tuples, dicts, sets); anything else stays in the candidate's process and crosses as a handle that
the test side can only use through more requests.

The test side reads its program, makes itself undumpable (Linux: no other process of this user can
read or write its memory or open its descriptors through /proc) and writes ARMED on the verdict
pipe before the grader starts the candidate, so nothing the candidate does can change the test.
Outside bubblewrap (GUARD_DIR not empty) the candidate also runs under `guard`, an audit hook that
holds its writes to GUARD_DIR and at most MAX_NAMES files there, and refuses processes, signals,
sockets, other processes' /proc entries and the modules that would go around the hook or write files
from C (sqlite3, readline, Tcl, dbm, /dev/shm), where it cannot see the path.
"""

import builtins
import json
import operator
import os
import resource
import struct
import sys

MESSAGE_LIMIT = 16 << 20         # one request or reply; a bigger one ends the run as a failure
ARMED = b"armed\n"               # the test side's first bytes on the verdict pipe: its program is read
HEADER = struct.Struct(">Q")
# What the test side may ask of a candidate object: the operators Python applies to a value, by name.
OPERATIONS = {name: getattr(operator, name) for name in (
    "eq", "ne", "lt", "le", "gt", "ge", "getitem", "setitem", "delitem", "contains", "add", "sub", "mul",
    "truediv", "floordiv", "mod", "pow", "matmul", "and_", "or_", "xor", "lshift", "rshift", "neg", "pos",
    "abs", "invert", "index")}
OPERATIONS.update(len=len, iter=iter, next=next, hash=hash, bool=bool, str=str, repr=repr, int=int, float=float,
                  complex=complex, format=format, getattr=getattr, setattr=setattr, call=lambda f, *a, **k: f(*a, **k))


def set_limits(cpu_seconds: int, memory_bytes: int, file_bytes: int) -> None:
    for kind, value in ((resource.RLIMIT_CPU, cpu_seconds), (resource.RLIMIT_AS, memory_bytes),
                        (resource.RLIMIT_FSIZE, file_bytes), (resource.RLIMIT_NPROC, 1), (resource.RLIMIT_CORE, 0)):
        try:
            resource.setrlimit(kind, (value, value))
        except (ValueError, OSError):
            pass


# -- the pipe: length-prefixed JSON ---------------------------------------------------------------
def send(fd: int, message) -> None:
    data = json.dumps(message).encode()
    if len(data) > MESSAGE_LIMIT:
        raise ValueError(f"a value of {len(data)} bytes is over the sandbox's {MESSAGE_LIMIT}-byte message limit")
    data = HEADER.pack(len(data)) + data
    while data:
        data = data[os.write(fd, data):]


def _read_exactly(fd: int, size: int) -> bytes | None:
    chunks, left = [], size
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def receive(fd: int):
    """The next message, or None when the other side closed its end."""
    header = _read_exactly(fd, HEADER.size)
    if header is None:
        return None
    (size,) = HEADER.unpack(header)
    if size > MESSAGE_LIMIT:
        raise ValueError(f"the other side sent {size} bytes, over the {MESSAGE_LIMIT}-byte message limit")
    data = _read_exactly(fd, size)
    if data is None:
        return None
    return json.loads(data)


# -- values: plain data crosses, everything else is a reference ------------------------------------
_SCALARS = (type(None), bool, int, float, str)
_TAGS = {list: "l", tuple: "t", set: "s", frozenset: "f"}


def encode(value, reference):
    """`value` as JSON-able data; objects that are not plain data go through `reference`."""
    kind = type(value)
    if kind in _SCALARS:
        return value
    if kind in _TAGS:
        return {_TAGS[kind]: [encode(item, reference) for item in value]}
    if kind is dict:
        return {"d": [[encode(k, reference), encode(v, reference)] for k, v in value.items()]}
    if kind is bytes:
        return {"b": value.hex()}
    if kind is complex:
        return {"c": [value.real, value.imag]}
    return reference(value)


def decode(data, resolve):
    """The value `encode` wrote; a reference ({"h": id} or {"n": name}) goes through `resolve`."""
    if type(data) in _SCALARS:
        return data
    if type(data) is not dict or len(data) != 1:
        raise ValueError(f"not a sandbox value: {str(data)[:80]}")
    (tag, body), = data.items()
    if tag in ("l", "t", "s", "f"):
        items = [decode(item, resolve) for item in body]
        return {"l": list, "t": tuple, "s": set, "f": frozenset}[tag](items)
    if tag == "d":
        return {decode(k, resolve): decode(v, resolve) for k, v in body}
    if tag == "b":
        return bytes.fromhex(body)
    if tag == "c":
        return complex(*body)
    if tag in ("h", "n"):
        return resolve(tag, body)
    raise ValueError(f"unknown sandbox value tag {tag!r}")


def describe(error: BaseException) -> list[str]:
    return [type(error).__name__, str(error)[:1000]]


# -- the candidate's side -------------------------------------------------------------------------
def prctl(option: int, value: int) -> None:
    """Linux's prctl(2), before the candidate's code runs (the guard refuses ctypes after); elsewhere nothing."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError, ImportError):
        pass


def undumpable() -> None:
    """Linux: no process of this user can ptrace this one, read or write its memory, or open its
    descriptors through /proc/PID (PR_SET_DUMPABLE 0)."""
    prctl(4, 0)                                                    # PR_SET_DUMPABLE = 4


# Audit events the guarded candidate may never raise: new processes, signals, sockets, links, the
# working directory (paths are judged against it), and every way to the hook's frames (a tracer; a
# traceback's tb_frame, which raises object.__getattr__) or an object walk that would find its state.
# The hook calls no code of the candidate's (exact str, bytes and int only), so no frame of the
# candidate's is live below it.
_REFUSED_EVENTS = frozenset((
    "os.fork", "os.forkpty", "os.exec", "os.posix_spawn", "os.spawn", "os.system", "os.startfile",
    "subprocess.Popen", "os.kill", "os.killpg", "signal.pthread_kill", "os.chdir", "os.link", "os.symlink",
    "os.chflags", "os.lchflags", "os.chown", "os.lchown", "os.setxattr", "os.removexattr", "socket.__new__",
    "socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg", "gc.get_objects", "gc.get_referrers",
    "gc.get_referents", "sys._current_frames", "sys.settrace", "sys.setprofile",
    "object.__getattr__", "sys.remote_exec", "pty.spawn", "ctypes.dlopen", "resource.prlimit",
    # sqlite opens its files in C (no "open" event) and ATTACH / VACUUM INTO name files in SQL: no
    # connection at all, in case _sqlite3 is reached around the refused import below
    "sqlite3.connect", "sqlite3.connect/handle", "sqlite3.enable_load_extension", "sqlite3.load_extension"))
# Modules that would go around the hook: a process without an audit event, raw memory, or another
# interpreter; and those that write files from C, where no "open" event lets the hook judge the path:
# sqlite3 (databases, ATTACH, VACUUM INTO, file: URIs), readline's history files, Tcl's `open`, dbm's
# files, /dev/shm (POSIX shared memory, named semaphores). Refused where they are first imported, by
# their own name or as the last part of another one (an extension module loaded from its file as
# "x._sqlite3" is the same code); the hook is installed before the candidate's code and none of them
# is imported before it.
_REFUSED_MODULES = frozenset(("_posixsubprocess", "subprocess", "ctypes", "_ctypes", "_testcapi",
                              "_testinternalcapi", "_xxsubinterpreters", "_interpreters", "_xxinterpchannels",
                              "sqlite3", "_sqlite3", "readline", "_tkinter", "_dbm", "_gdbm", "_posixshmem",
                              "_multiprocessing"))
# Audit events on paths: (index of each path argument, index of its dir_fd or None, whether it names
# a new file). Each path must lie inside the guarded folder.
_PATH_EVENTS = {"os.remove": ((0, 1, False),), "os.rmdir": ((0, 1, False),), "os.mkdir": ((0, 2, True),),
                "os.rename": ((0, 2, False), (1, 3, True)), "os.truncate": ((0, None, False),),
                "os.chmod": ((0, 2, False),), "os.utime": ((0, 3, False),), "shutil.rmtree": ((0, 1, False),),
                "shutil.copyfile": ((1, None, True),), "shutil.copytree": ((1, None, True),),
                "shutil.move": ((1, None, True),), "shutil.chown": ((0, None, False),)}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def guard(folder: str, max_names: int) -> None:
    """Install an audit hook (it cannot be removed) that keeps the candidate's writes inside
    `folder` and at most `max_names` file and folder names there (created, renamed to or opened for
    writing; with the file-size limit, this bounds the bytes it can leave), refuses
    _REFUSED_EVENTS, imports of _REFUSED_MODULES (as ImportError: as if not installed, so code with an
    optional import of one carries on without it), reads of /proc entries of other processes and of
    the sandbox's other folders (the test's), and directories outside `folder` opened as descriptors
    (a dir_fd would escape the path check).

    The second line outside bubblewrap, for a candidate in the same user account as the grader: the
    hook keeps what it uses in its closure (the candidate cannot reach it: gc's object walks are
    refused) and calls only built-in functions, so monkeypatching os or builtins changes nothing;
    paths are judged as written (normalised, against the folder it started in) because links cannot
    be made and the working directory cannot change."""
    import _signal
    import posix
    import signal
    # No audit event of their own: files without open(), processes, signals to a pidfd, the grader's
    # scheduling, memory outside the address-space limit. Deleted from the built-in modules, they do
    # not come back with a reload.
    for module, names in (((posix, os), ("mkfifo", "mknod", "fork", "forkpty", "register_at_fork", "pidfd_open",
                                         "setpriority", "sched_setaffinity", "sched_setscheduler", "sched_setparam",
                                         "memfd_create")),
                          ((_signal, signal), ("pidfd_send_signal",))):
        for owner in module:
            for name in names:
                if hasattr(owner, name):
                    delattr(owner, name)
    # Everything the hook uses is bound here, so that rebinding a module's or builtins' names cannot
    # reach it (the hook runs inside the candidate's interpreter).
    stat, refused, unavailable, type_of, len_of = posix.stat, PermissionError, ImportError, type, len
    str_type, bytes_type, int_type, last_part = str, bytes, int, str.rpartition
    refused_events, refused_modules, path_events = _REFUSED_EVENTS, _REFUSED_MODULES, dict(_PATH_EVENTS)
    write_flags, names, own, root = _WRITE_FLAGS, set(), f"/proc/{posix.getpid()}", folder.rstrip("/")

    def absolute(path, dir_fd=None) -> str:
        if type_of(path) is bytes_type:
            path = path.decode("utf-8", "surrogateescape")
        if type_of(path) is not str_type:
            raise refused("sandbox fallback: a path must be given as str or bytes")
        if dir_fd not in (None, -1):
            raise refused("sandbox fallback: dir_fd is not allowed")
        if not path.startswith("/"):
            path = root + "/" + path
        parts = []
        for part in path.split("/"):
            if part in ("", "."):
                continue
            if part == "..":
                if parts:
                    parts.pop()
            else:
                parts.append(part)
        return "/" + "/".join(parts)

    def inside(path: str) -> bool:
        return path == root or path.startswith(root + "/")

    def check_write(path: str, new: bool) -> None:
        if not inside(path):
            raise refused(f"sandbox fallback: cannot write outside its folder ({path[:80]})")
        if new and path not in names:
            if len_of(names) >= max_names:
                raise refused(f"sandbox fallback: at most {max_names} files and folders may be written")
            names.add(path)

    def check_read(path: str) -> None:
        if path.startswith("/proc/") and path.split("/")[2].isdigit() and not (path == own or path.startswith(own + "/")):
            raise refused("sandbox fallback: other processes' /proc entries are not readable")
        if "/lopa-sandbox-" in path and not inside(path):       # the test's folder, and other runs'
            raise refused("sandbox fallback: the test's files are not readable")
        if not inside(path):
            try:
                is_folder = stat(path).st_mode & 0o170000 == 0o040000
            except OSError:
                return
            if is_folder:
                raise refused("sandbox fallback: a folder outside its own cannot be opened")

    def hook(event: str, args) -> None:
        if event in refused_events or event.startswith("ctypes."):
            raise refused(f"sandbox fallback: {event} is not allowed")
        if event == "import":
            if args and (type_of(args[0]) is not str_type or args[0] in refused_modules
                         or last_part(args[0], ".")[2] in refused_modules):
                raise unavailable(f"sandbox fallback: module {args[0]} is not allowed")
        elif event == "open":
            path, mode, flags = args
            if type_of(path) is int_type:
                return
            path = absolute(path)
            writing = type_of(flags) is int_type and flags & write_flags
            if writing:
                check_write(path, True)
            else:
                check_read(path)
        elif event in path_events:
            for index, fd_index, new in path_events[event]:
                if index >= len_of(args) or type_of(args[index]) is int_type:
                    continue
                dir_fd = args[fd_index] if fd_index is not None and fd_index < len_of(args) else None
                check_write(absolute(args[index], dir_fd), new)

    sys.addaudithook(hook)


def disarm() -> None:
    """Remove what a wrong solution could use to damage the machine (defence in depth: the sandbox
    is what holds; this turns an accident into a clear failure)."""
    import shutil
    import socket
    import subprocess
    for module, names in ((os, "system popen fork forkpty execv execve spawnv kill killpg putenv remove unlink "
                               "rmdir removedirs rename renames replace truncate chmod chown setuid chdir"),
                          (shutil, "rmtree move chown copy copyfile"), (subprocess, "Popen call run check_output"),
                          (socket, "socket create_connection socketpair")):
        for name in names.split():
            if hasattr(module, name):
                setattr(module, name, None)


def serve(path: str, run_name: str, requests: int, replies: int, guarded: str = "", max_names: int = 0) -> None:
    """Run the candidate's code, say whether it reached its end, then answer requests until the
    test side closes its end. `guarded`: the folder `guard` holds it to ("" under bubblewrap)."""
    namespace = {"__name__": run_name, "__builtins__": builtins}
    handles: dict[int, object] = {}

    def keep(value):
        handles[id(value)] = value
        return {"h": id(value)}

    def resolve(tag, key):
        if tag == "h":
            return handles[key]
        if key not in namespace:
            raise NameError(f"name {key!r} is not defined")
        return namespace[key]

    try:
        with open(path, encoding="utf-8") as f:
            code = compile(f.read(), path, "exec")
        if guarded:
            guard(guarded, max_names)
        else:
            disarm()
        exec(code, namespace)
    except BaseException as error:       # SystemExit too: the code did not run to its end
        send(replies, {"raised": describe(error)})
        return
    send(replies, {"ready": True})
    while (request := receive(requests)) is not None:
        try:
            operation = OPERATIONS[request["op"]]
            args = decode(request["args"], resolve)
            kwargs = decode(request["kwargs"], resolve)
            reply = {"value": encode(operation(*args, **kwargs), keep)}
        except BaseException as error:   # the candidate's exception, reported to the test that caused it
            reply = {"raised": describe(error)}
        try:
            send(replies, reply)
        except (ValueError, RecursionError) as error:
            send(replies, {"raised": describe(error)})


# -- the test's side ------------------------------------------------------------------------------
class CandidateGone(BaseException):
    """The candidate's process ended, exited or broke the protocol while a test waited on it. Not an
    Exception, so a test's `except Exception` cannot take it for an answer."""


def rebuild(raised: list) -> BaseException:
    """The candidate's exception as the test sees it: the same built-in type where there is one
    (so `except ValueError` in a test works), never one that stops the interpreter."""
    name, message = str(raised[0]), str(raised[1])
    if name == "SystemExit":
        return CandidateGone(f"the candidate's code exited (SystemExit: {message})")
    kind = getattr(builtins, name, None)
    if isinstance(kind, type) and issubclass(kind, Exception):
        try:
            return kind(message) if message else kind()
        except TypeError:                # e.g. UnicodeDecodeError needs five arguments
            pass
    return RuntimeError(f"{name}: {message}")


class Channel:
    def __init__(self, requests: int, replies: int):
        self.requests, self.replies = requests, replies

    def ask(self, op: str, *args, **kwargs):
        request = {"op": op, "args": encode(list(args), _reference), "kwargs": encode(kwargs, _reference)}
        try:
            send(self.requests, request)
            reply = receive(self.replies)
            if reply is None:
                raise CandidateGone("the candidate's process ended before answering")
            value = None if "raised" in reply else decode(reply["value"], lambda tag, key: Remote(self, {tag: key}))
        except (OSError, ValueError, KeyError, TypeError, RecursionError) as error:
            raise CandidateGone(f"no answer from the candidate's process ({type(error).__name__}: {error})") from None
        if "raised" in reply:
            raise rebuild(reply["raised"])
        return value


def _reference(value):
    if type(value) is Remote:
        return object.__getattribute__(value, "_ref")
    raise TypeError(f"a {type(value).__name__} cannot be passed to the candidate's code (only plain data and "
                    "its own objects cross the sandbox)")


class Remote:
    """A name or object of the candidate's, used from the tests: every operation is a request."""

    def __init__(self, channel: Channel, ref: dict):
        object.__setattr__(self, "_channel", channel)
        object.__setattr__(self, "_ref", ref)

    def _ask(self, op, *args, **kwargs):
        return object.__getattribute__(self, "_channel").ask(op, self, *args, **kwargs)

    def __call__(self, *args, **kwargs):
        return self._ask("call", *args, **kwargs)

    def __getattr__(self, name):
        return self._ask("getattr", name)

    def __setattr__(self, name, value):
        self._ask("setattr", name, value)

    def __contains__(self, item):        # `item in remote` asks contains(remote, item)
        return bool(self._ask("contains", item))


def _forward(op: str):
    return lambda self, *args: self._ask(op, *args)


def _forward_reflected(op: str):         # `1 + remote` asks add(1, remote)
    return lambda self, other: object.__getattribute__(self, "_channel").ask(op, other, self)


for _op in ("eq", "ne", "lt", "le", "gt", "ge", "getitem", "setitem", "delitem", "add", "sub", "mul", "truediv",
            "floordiv", "mod", "pow", "matmul", "and", "or", "xor", "lshift", "rshift", "neg", "pos", "abs",
            "invert", "index", "len", "iter", "next", "hash", "bool", "str", "repr", "int", "float", "complex",
            "format"):
    setattr(Remote, f"__{_op}__", _forward(_op + "_" if _op in ("and", "or") else _op))
for _op in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and", "or", "xor", "lshift",
            "rshift"):
    setattr(Remote, f"__r{_op}__", _forward_reflected(_op + "_" if _op in ("and", "or") else _op))


class TestNamespace(dict):
    """The tests' globals: a name they do not define (and that is not a builtin) is the candidate's."""

    def __init__(self, channel: Channel, run_name: str):
        super().__init__(__name__=run_name, __builtins__=builtins)
        self.channel = channel

    def __missing__(self, name):
        if hasattr(builtins, name):
            raise KeyError(name)                 # the interpreter then looks in builtins
        return Remote(self.channel, {"n": name})


def run_tests(path: str, run_name: str, requests: int, replies: int, result: int) -> None:
    """Wait for the candidate to reach the end of its code, run the tests against it, and write
    the verdict: "passed" only when the tests returned here, in this process."""
    channel = Channel(requests, replies)
    try:
        with open(path, encoding="utf-8") as f:    # read before the candidate starts: see ARMED
            text = f.read()
    except BaseException as error:
        text = error
    undumpable()
    os.write(result, ARMED)
    try:
        if isinstance(text, BaseException):
            raise text
        first = receive(replies)
        if first is None:
            raise CandidateGone("the candidate's process ended before its code ran to the end")
        if "raised" in first:
            raise rebuild(first["raised"])
        code = compile(text, path, "exec")
        exec(code, TestNamespace(channel, run_name))
        verdict = "passed"
    except BaseException as error:               # SystemExit too: the tests did not return
        name, message = describe(error)
        verdict = f"failed: {name}: {message}" if message else f"failed: {name}"
    os.write(result, verdict.encode("utf-8", "replace")[:4000])


def main(argv: list[str]) -> None:
    role, path, run_name = argv[:3]
    requests, replies, cpu_seconds, memory_bytes, file_bytes = map(int, argv[3:8])
    set_limits(cpu_seconds, memory_bytes, file_bytes)
    prctl(1, 9)        # PR_SET_PDEATHSIG = 1, SIGKILL: it dies with the grader (the guard allows it no children)
    sys.argv = [path]
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 3000))
    if role == "candidate":
        serve(path, run_name, requests, replies, argv[8], int(argv[9]))
    else:
        run_tests(path, run_name, requests, replies, int(argv[8]))


if __name__ == "__main__":
    main(sys.argv[1:])
