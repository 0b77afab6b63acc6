"""What runs inside the code sandbox (lopa.eval.sandbox): standard library only, started as a
script in each of the two sandboxed processes, never imported by the grader.

    python -I -B child.py candidate PROGRAM RUN_NAME REQUESTS_FD REPLIES_FD CPU_S MEMORY_B FILE_B
    python -I -B child.py test      PROGRAM RUN_NAME REQUESTS_FD REPLIES_FD CPU_S MEMORY_B FILE_B RESULT_FD

The candidate side runs the untrusted code, then answers calls on its names. The test side runs the
tests with every name they do not define standing for the candidate's, sends each use of one as a
request and rebuilds the answer from plain data; it alone holds the pipe the verdict goes back on.
Nothing the candidate sends is code: values cross as tagged JSON (numbers, strings, bytes, lists,
tuples, dicts, sets); anything else stays in the candidate's process and crosses as a handle that
the test side can only use through more requests.
"""

import builtins
import json
import operator
import os
import resource
import struct
import sys

MESSAGE_LIMIT = 16 << 20         # one request or reply; a bigger one ends the run as a failure
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


def serve(path: str, run_name: str, requests: int, replies: int) -> None:
    """Run the candidate's code, say whether it reached its end, then answer requests until the
    test side closes its end."""
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
        first = receive(replies)
        if first is None:
            raise CandidateGone("the candidate's process ended before its code ran to the end")
        if "raised" in first:
            raise rebuild(first["raised"])
        with open(path, encoding="utf-8") as f:
            code = compile(f.read(), path, "exec")
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
    sys.argv = [path]
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 3000))
    if role == "candidate":
        serve(path, run_name, requests, replies)
    else:
        run_tests(path, run_name, requests, replies, int(argv[8]))


if __name__ == "__main__":
    main(sys.argv[1:])
