"""Any JSON value in any field of a chunk, any bytes, any read boundaries: through the real transport (a
loopback socket), the processor greenlet and its row writer, every request gets exactly one row,
good streams keep their exact numbers, bad ones a named error, and the processor lives on."""

from __future__ import annotations

import csv
import json
import time
from argparse import Namespace

import gevent
import gevent.server
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from locust import events
from locust.env import Environment

from locust_spec.client.client import Capture
from locust_spec.client.transport import Arrivals, Connection, Endpoint, StreamFailure, request_bytes
from locust_spec.recording.processor import Processor
from locust_spec.recording.records import FileSink

KINDS = ("malformed_sse", "server_error", "no_done", "too_large", "reset")
MAX_LINE = 1 << 16
MAX_BODY = 1 << 18


def chunk(n: int, text: str = "x") -> dict:
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}],
            "usage": {"prompt_tokens": 7, "completion_tokens": n}}


# Every place a value is read from, and a few around them: (path of keys/indexes, leaf)
PATHS = [("choices",), ("choices", 0), ("choices", 0, "delta"), ("choices", 0, "delta", "content"),
         ("choices", 0, "delta", "reasoning_content"), ("choices", 0, "delta", "tool_calls"),
         ("choices", 0, "finish_reason"), ("usage",), ("usage", "completion_tokens"),
         ("usage", "prompt_tokens"), ("metrics",), ("metrics", "speculative_decoding"),
         ("metrics", "speculative_decoding", "num_draft_tokens"), ("error",), ("error", "message"), ("id",)]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6)


def put(obj: dict, path: tuple, value: object) -> dict:
    """`obj` with `value` at `path`, creating the containers on the way (any container breaking it)."""
    node = obj
    for key in path[:-1]:
        if isinstance(node, dict):
            node = node.setdefault(key, {}) if not isinstance(node.get(key), (dict, list)) else node[key]
        elif isinstance(node, list) and isinstance(key, int) and key < len(node):
            node = node[key]
        else:
            return obj
    last = path[-1]
    if isinstance(node, dict) or isinstance(node, list) and isinstance(last, int) and last < len(node):
        node[last] = value
    return obj


@st.composite
def hostile_event(draw) -> bytes:
    kind = draw(st.sampled_from(["value"] * 6 + ["bytes", "line"]))
    if kind == "value":
        mutated = put(chunk(draw(st.integers(0, 5))), draw(st.sampled_from(PATHS)), draw(json_values))
        return b"data: " + json.dumps(mutated).encode() + b"\n\n"  # stdlib: big ints, NaN, Infinity too
    if kind == "bytes":
        return draw(st.binary(max_size=200))
    return b"data: " + draw(st.binary(min_size=1, max_size=3)) * draw(st.integers(1, 3 * MAX_LINE))


@st.composite
def stream(draw) -> tuple[list[bytes], bool]:
    """(the body cut into writes, whether it is a good stream), good ones: tokens 1..n, then [DONE]."""
    good = draw(st.booleans())
    n = draw(st.integers(1, 6))
    events_ = [b"data: " + json.dumps(chunk(i)).encode() + b"\n\n" for i in range(1, n + 1)]
    if not good:
        for _ in range(draw(st.integers(1, 4))):
            events_.insert(draw(st.integers(0, len(events_))), draw(hostile_event()))
    if good or draw(st.booleans()):
        events_.append(b"data: [DONE]\n\n")
    body = b"".join(events_)
    cuts = sorted(set(draw(st.lists(st.integers(0, len(body)), max_size=8))))
    pieces = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]
    return [p for p in pieces if p], good


class Server:
    """Answers each request on a connection with the next queued body, chunked, in the given writes."""

    def __init__(self) -> None:
        self.body: list[bytes] = []
        self.server = gevent.server.StreamServer(("127.0.0.1", 0), self.handle)
        self.server.start()

    def handle(self, sock, _addr) -> None:
        buf = b""
        while True:
            while b"\r\n\r\n" not in buf:
                data = sock.recv(65536)
                if not data:
                    return
                buf += data
            head, buf = buf.split(b"\r\n\r\n", 1)
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            while len(buf) < length:
                buf += sock.recv(65536)
            buf = buf[length:]
            try:
                sock.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                             b"transfer-encoding: chunked\r\n\r\n")
                for piece in self.body:
                    sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
                    gevent.sleep(0)
                sock.sendall(b"0\r\n\r\n")
            except OSError:
                return


@pytest.fixture(scope="module")
def rig(tmp_path_factory):
    prefix = tmp_path_factory.mktemp("hostile") / "run"
    env = Environment(events=events, parsed_options=Namespace())
    sink = FileSink(str(prefix))
    proc = Processor(env.events.request.fire, lambda: sink)
    proc.start()
    server = Server()
    conn = Connection(Endpoint(f"http://127.0.0.1:{server.server.server_port}"), 5.0)
    yield proc, server, conn, prefix
    proc.stop()
    sink.close()
    server.server.stop()


def send(proc: Processor, conn: Connection) -> None:
    capture = Capture("chat", "p", 1, False, wire=Arrivals())
    try:
        conn.stream(request_bytes(conn.endpoint, "/chat/completions", b"{}", ""), capture.wire, 5.0, 5.0,
                    MAX_LINE, MAX_BODY)
    except StreamFailure as e:
        capture.error = str(e)
    capture.start_unix, capture.start = conn.start_unix, conn.start
    capture.end = time.perf_counter()
    proc.submit(capture)


def rows(prefix) -> list[dict]:
    with open(f"{prefix}_requests.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def last_row(proc: Processor, conn: Connection, server: Server, pieces: list[bytes], prefix) -> dict:
    """Serve `pieces` to one request; once the processor has reported it, its row (one per request)."""
    server.body = pieces
    before = proc.requests
    send(proc, conn)
    with gevent.Timeout(30):
        while proc.requests == before:
            gevent.sleep(0.001)
    assert proc.requests == before + 1
    assert proc._worker is not None and not proc._worker.dead
    proc.sink.flush()
    written = rows(prefix)
    assert len(written) == proc.requests
    return written[-1]


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(stream())
@example(([b'data: {"choices":[{"delta":"x"}]}\n\n'], False))
@example(([b'data: {"choices":[{"delta":{"content":5}}]}\n\ndata: [DONE]\n\n'], False))
@example(([b'data: {"choices":[{"delta":{"content":"a"}}],"usage":{"completion_tokens":1e999}}\n\n'], False))
@example(([b"data: \xff\xfe\n\n", b"data: [DONE]\n\n"], False))
def test_every_request_gets_one_row_and_the_processor_lives(rig, case):
    proc, server, conn, prefix = rig
    pieces, good = case
    row = last_row(proc, conn, server, pieces, prefix)
    if good:
        n = sum(1 for p in b"".join(pieces).split(b"\n") if p.startswith(b'data: {'))
        assert row["error"] == "" and int(row["output_tokens"]) == n and int(row["chunks"]) == n
    else:
        assert row["error"] == "" or row["error"].split(":")[0] in KINDS, row["error"]


def test_a_body_without_newlines_is_cut_at_the_line_limit(rig):
    proc, server, conn, prefix = rig
    row = last_row(proc, conn, server, [b"x" * 65536] * 64, prefix)  # 4 MiB, no newline
    assert row["error"].startswith("too_large: a line over")


def test_one_token_then_a_huge_line_keeps_the_token_and_names_the_line(rig):
    proc, server, conn, prefix = rig
    token = b"data: " + json.dumps(chunk(1)).encode() + b"\n\n"
    row = last_row(proc, conn, server, [token] + [b"data: " + b"y" * 65536] * 128, prefix)  # 8 MiB line
    assert row["error"].startswith("too_large: a line over") and row["output_tokens"] == "1"
    assert float(row["ttft_ms"]) > 0


def test_a_response_over_the_limit_is_cut_and_named(rig):
    proc, server, conn, prefix = rig
    many = [b"data: " + json.dumps(chunk(i)).encode() + b"\n\n" for i in range(1, 3000)]  # ~360 kB
    row = last_row(proc, conn, server, many, prefix)
    assert row["error"].startswith("too_large: a response over")
    assert 0 < int(row["output_tokens"]) < 3000
