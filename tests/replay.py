"""Replay server for tests: answers chat completions with the REAL captured vLLM SSE bytes, at the captured
read times (scaled), and logs what it sent; can inject faults (500, reset, malformed line, stall, 400 on
continuous_usage_stats). Run: python -m tests.replay --port P --capture stream_ngram [--send-log F]."""

from __future__ import annotations

import argparse
import asyncio
import functools
import gzip
import itertools
import json
import socket
import struct
import time
from dataclasses import dataclass
from pathlib import Path

CAPTURES = Path(__file__).resolve().parent / "data" / "captures" / "vllm-0.32-cpu"
MODELS = b'{"object":"list","data":[{"id":"tiny-llama","object":"model"}]}'
FAULTS = ("ok", "500", "reset", "malformed", "stall", "nodone", "badtype", "bigline", "gzip")
BIG_LINE_BYTES = 2 << 20  # "bigline": one line past the client's default 1 MiB limit, then the rest


@functools.cache
def gzip_bomb() -> bytes:
    """For "gzip": 64 MiB of newlines in ~64 kB, sent compressed though nobody asked."""
    return gzip.compress(b"\n" * (64 << 20), 9)


@dataclass(frozen=True)
class Capture:
    """A captured stream: its bytes cut at the real socket reads, with each read's time in seconds."""

    name: str
    reads: tuple[tuple[float, bytes], ...]

    @property
    def data(self) -> bytes:
        return b"".join(b for _, b in self.reads)


def load_capture(name: str) -> Capture:
    data = (CAPTURES / f"{name}.sse").read_bytes()
    timing = json.loads((CAPTURES / f"{name}.sse.timing.json").read_text())
    reads, offset = [], 0
    for t, size in timing["reads"]:
        reads.append((float(t), data[offset : offset + size]))
        offset += size
    assert offset == len(data), "timing file does not cover the capture"
    return Capture(name, tuple(reads))


class Replay:
    def __init__(self, capture: Capture, time_scale: float, faults: list[str], send_log: Path | None,
                 reject_continuous: bool) -> None:
        self.capture = capture
        self.time_scale = time_scale
        self.faults = itertools.cycle(faults)
        self.log = send_log.open("a", buffering=1) if send_log else None
        self.reject_continuous = reject_continuous
        self.counter = itertools.count()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                t_recv = time.time()
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                pairs = (ln.split(":", 1) for ln in lines[1:] if ":" in ln)
                headers = {k.lower(): v.strip() for k, v in pairs}
                body = await reader.readexactly(int(headers.get("content-length", 0)))
                if path == "/health":
                    await self.plain(writer, 200, b"")
                elif path == "/v1/models":
                    await self.plain(writer, 200, MODELS)
                elif path == "/v1/chat/completions" and method == "POST":
                    if not await self.chat(writer, body, headers, t_recv):
                        return
                else:
                    await self.plain(writer, 404, b'{"error":"not found"}')
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def plain(self, writer: asyncio.StreamWriter, status: int, body: bytes) -> None:
        writer.write(
            f"HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n\r\n".encode() + body
        )
        await writer.drain()

    async def chat(self, writer, body: bytes, headers: dict, t_recv: float) -> bool:
        request = json.loads(body)
        if self.reject_continuous and "continuous_usage_stats" in request.get("stream_options", {}):
            await self.plain(writer, 400, b'{"error":{"message":"continuous_usage_stats is not supported"}}')
            self.write_log({"t_recv_unix": t_recv, "status": 400, "rejected": "continuous_usage_stats"})
            return True
        n = next(self.counter)
        fault = next(self.faults)
        entry = {"request": n, "t_recv_unix": t_recv, "fault": fault,
                 "authorization": headers.get("authorization", ""), "body": request, "writes": [],
                 "accept_encoding": headers.get("accept-encoding")}
        if fault == "500":
            await self.plain(writer, 500, b'{"error":{"message":"boom"}}')
            entry["status"] = 500
            self.write_log(entry)
            return True
        encoding = b"content-encoding: gzip\r\n" if fault == "gzip" else b""
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n%s"
                     b"transfer-encoding: chunked\r\n\r\n" % encoding)
        await writer.drain()
        reads = list(self.capture.reads)
        cut = len(reads) // 2
        if fault == "gzip":
            reads = [(0.0, gzip_bomb())]
        if fault == "badtype":  # valid JSON, a wrong type where a value is read
            reads.insert(cut, (reads[cut][0], b'data: {"choices":[{"delta":"x"}]}\n\n'))
        if fault == "bigline":
            reads[cut:cut] = [(reads[cut][0], b"data: " + b"y" * (64 << 10))] * (BIG_LINE_BYTES >> 16)
        if fault == "malformed":
            reads.insert(cut, (reads[cut][0], b"data: {this is not json\n\n"))
        if fault == "nodone":
            reads = [r for r in reads if b"[DONE]" not in r[1]]
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        for i, (t, data) in enumerate(reads):
            if fault in ("reset", "stall") and i == cut:
                self.write_log(entry)
                if fault == "reset":
                    sock = writer.get_extra_info("socket")
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    writer.transport.abort()
                    return False
                await asyncio.sleep(3600)
            delay = t0 + t * self.time_scale - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            writer.write(b"%x\r\n%s\r\n" % (len(data), data))
            try:
                await writer.drain()
            except ConnectionError:  # the client gave up on this response (a limit, a timeout)
                self.write_log(entry)
                return False
            entry["writes"].append([time.time(), len(data), data.count(b"\n\n")])
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        self.write_log(entry)
        return True

    def write_log(self, entry: dict) -> None:
        if self.log:
            self.log.write(json.dumps(entry) + "\n")


async def serve(args: argparse.Namespace) -> None:
    replay = Replay(load_capture(args.capture), args.time_scale, args.faults.split(","),
                    Path(args.send_log) if args.send_log else None, args.reject_continuous)
    server = await asyncio.start_server(replay.handle, args.host, args.port)
    async with server:
        await server.serve_forever()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--capture", default="stream_ngram")
    p.add_argument("--time-scale", type=float, default=1.0, help="multiply the captured read times")
    p.add_argument("--faults", default="ok", help=f"comma list cycled per request, from {FAULTS}")
    p.add_argument("--reject-continuous", action="store_true", help="answer 400 to continuous_usage_stats")
    p.add_argument("--send-log", help="JSON line per request: receive time and every write")
    args = p.parse_args()
    for fault in args.faults.split(","):
        if fault not in FAULTS:
            p.error(f"unknown fault {fault!r}")
    asyncio.run(serve(args))


if __name__ == "__main__":
    main()
