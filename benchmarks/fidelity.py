"""Measurement fidelity: how far our client's timestamps, TTFT and ITL are from the server's truth.

Usage: .venv/bin/python benchmarks/fidelity.py [--quick] [--realtime] [--streams 1,16,64,256] [--steps 10,2]
       [--clients fast,openai] [--repeats 2] [--seconds 15] [--server pacer|sim] [--no-vllm] [--keep DIR]

Ground truth is the server's send log (time.time_ns() just before each chunk's write), the server on core
0; our ChatCompletionUser runs in one headless Locust process on core 1 with LOCUST_SPEC_TRACE, which
records each request's start and token-chunk arrivals on the wall clock by response id. Chunks are
matched per response id in order. The server is locust_spec/sim/pacer.py by default: exact fixed steps, one
token per stream per step, cheap enough to send 256 streams' chunks from one core; --server sim uses
spec-sim, whose steps follow its roofline (--time-scale calibrated per stream count to give the wanted
decode step; prefill steps run longer) and which saturates first at high stream counts. Where the
real-vLLM tier's environment exists, `vllm bench serve` runs on the same server and load (10 ms steps)
for comparison. --realtime runs server and client under SCHED_RR, so other work on a shared machine does
not preempt them.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from locust_spec.metrics.counters import parse_exposition  # noqa: E402
from locust_spec.sim import roofline  # noqa: E402

MAX_TOKENS = 128
PROMPT_TOKENS = 24  # about what spec-sim's tokenizer makes of the prompt below, chat template included
GPU, MODEL = "h100", "8b"
WARMUP_S, TAIL_S = 2.0, 1.0  # left out of the steady window: spawning, and the stop


@dataclass
class Config:
    streams: int
    step_ms: float
    client: str
    repeat: int


@dataclass
class Result:
    cfg: Config
    err_p50: float
    err_p99: float
    err_max: float
    itl_rep: tuple[float, float]
    itl_true: tuple[float, float]
    ttft_rep: tuple[float, float]
    ttft_true: tuple[float, float]
    ttft_server_mean: float
    ttft_client_mean: float
    chunks_s: float
    cpu_us_chunk: float
    cpu_pct: float
    lag_max_ms: float
    lag_late: int
    lag_samples: int
    running: float
    matched: int
    unmatched: int
    budget_share: float  # the plugin's own budget at this level (PREFIX_summary.json): CPU share of a core
    budget_us: float  # and its CPU us per chunk
    late_steps: int  # the pacer's steps started over a step late (the server, not the client, fell behind)


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    k = (len(s) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def time_scale(streams: int, step_ms: float) -> float:
    """Scale making a decode step of `streams` requests (mid-way through their outputs) last step_ms."""
    ctx = PROMPT_TOKENS + MAX_TOKENS // 2
    load = roofline.StepLoad(streams, streams, streams * ctx, streams * ctx)
    return step_ms / 1000.0 / roofline.step_seconds(roofline.GPUS[GPU], roofline.model_for(MODEL), load)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


REALTIME: list[str] = []  # `chrt --rr 1` with --realtime


def pinned(cmd: list[str], cpu: str) -> list[str]:
    if shutil.which("taskset") and (os.cpu_count() or 1) > 1:
        return [*REALTIME, "taskset", "-c", cpu, *cmd]
    return [*REALTIME, *cmd]


SERVER = ["pacer"]  # --server


def start_server(port: int, send_log: Path, streams: int, step_ms: float) -> subprocess.Popen:
    """The server under the client, pinned to core 0, logging every chunk's send time.

    pacer (locust_spec/sim/pacer.py): exact step_ms steps, cheap enough to send 256 streams' chunks from one
    core.
    sim: spec-sim with its roofline calibrated to step_ms (Python per token: the server saturates first at
    high stream counts, see pacer_late_steps / "server running" in the tables)."""
    if SERVER[0] == "pacer":
        cmd = [sys.executable, "-m", "locust_spec.sim.pacer", "--port", str(port), "--send-log",
               str(send_log), "--step-ms", f"{step_ms:g}"]
    else:
        cmd = [sys.executable, "-m", "locust_spec.sim", "--port", str(port), "--send-log", str(send_log),
               "--gpu", GPU, "--model-size", MODEL, "--max-num-seqs", str(max(256, streams)),
               "--time-scale", f"{time_scale(streams, step_ms):.6f}"]
    return subprocess.Popen(pinned(cmd, "0"), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def wait_http(url: str, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"spec-sim exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(url)


def scrape_running(url: str, out: list[tuple[float, float]], stop: threading.Event) -> None:
    while not stop.wait(0.5):
        try:
            with urllib.request.urlopen(url + "/metrics", timeout=2) as r:
                text = r.read().decode()
        except OSError:
            continue
        for s in parse_exposition(text):
            if s.metric == "vllm:num_requests_running":
                out.append((time.time(), s.value))


def server_counters(url: str) -> tuple[float, int]:
    """The server's own TTFT mean (ms) and, for the pacer, the steps it started over a step late."""
    with urllib.request.urlopen(url + "/metrics", timeout=5) as r:
        samples = parse_exposition(r.read().decode())
    total = sum(s.value for s in samples if s.metric == "vllm:time_to_first_token_seconds_sum")
    count = sum(s.value for s in samples if s.metric == "vllm:time_to_first_token_seconds_count")
    late = sum(s.value for s in samples if s.metric == "pacer_late_steps_total")
    return (total / count * 1000.0 if count else float("nan")), int(late)


def read_send_log(path: Path) -> dict[str, list[int]]:
    """Response id -> send times (ns) of its token-carrying chunks, in order."""
    out: dict[str, list[int]] = defaultdict(list)
    with path.open() as fh:
        for row in csv.DictReader(fh):
            if int(row["tokens"]) > 0:
                out[row["request_id"]].append(int(row["time_ns"]))
    return out


def read_trace(path: Path) -> tuple[dict[str, int], dict[str, list[int]]]:
    starts: dict[str, int] = {}
    chunks: dict[str, list[int]] = defaultdict(list)
    with path.open() as fh:
        for row in csv.DictReader(fh):
            if row["event"] == "start":
                starts[row["request_id"]] = int(row["time_ns"])
            else:
                chunks[row["request_id"]].append(int(row["time_ns"]))
    return starts, chunks


def run_one(cfg: Config, seconds: float, work: Path) -> Result:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    tag = f"{cfg.client}-{cfg.streams}-{cfg.step_ms:g}-{cfg.repeat}"
    send_log, trace = work / f"send-{tag}.csv", work / f"trace-{tag}.csv"
    sim = start_server(port, send_log, cfg.streams, cfg.step_ms)
    try:
        wait_http(url + "/health", sim)
        prompts = work / "prompts.jsonl"
        prompts.write_text('{"id": "p", "class": "bench", "prompt": "Write about the sea."}\n')
        prefix = work / f"run-{tag}"
        cmd = [str(Path(sys.executable).parent / "locust"), "-f", str(REPO / "locustfiles" / "chat.py"),
               "--headless", "-u", str(cfg.streams), "-r", str(cfg.streams), "-t", f"{seconds:g}s",
               "--host", url, "--prompts", str(prompts), "--max-tokens", str(MAX_TOKENS), "--ignore-eos",
               "--csv", str(prefix), "--only-summary", "--loglevel", "WARNING"]
        if cfg.client == "openai":
            cmd += ["--client", "openai"]
        env = {**os.environ, "LOCUST_SPEC_TRACE": str(trace)}
        running: list[tuple[float, float]] = []
        stop = threading.Event()
        scraper = threading.Thread(target=scrape_running, args=(url, running, stop), daemon=True)
        loc = subprocess.Popen(pinned(cmd, "1"), cwd=work, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
        scraper.start()
        cpu0, w0, cpu1, w1 = steady_cpu(loc, seconds, WARMUP_S, TAIL_S)
        _, stderr = loc.communicate(timeout=seconds + 120)
        stop.set()
        scraper.join()
        srv_ttft, late_steps = server_counters(url)
    finally:
        sim.terminate()
        sim.wait(30)
    if loc.returncode not in (0, 1):
        raise RuntimeError(f"locust exited {loc.returncode}: {stderr[-2000:]}")
    sent = read_send_log(send_log)
    starts, got = read_trace(trace)
    errors: list[float] = []
    itl_true: list[float] = []
    itl_client: list[float] = []
    ttft_true: list[float] = []
    ttft_client: list[float] = []
    unmatched = 0
    for rid, recv in got.items():
        truth = sent.get(rid)
        if truth is None or len(truth) < len(recv):
            unmatched += len(recv)
            continue
        errors.extend((r - s) / 1e6 for r, s in zip(recv, truth, strict=False))
        itl_true.extend((b - a) / 1e6 for a, b in zip(truth[:len(recv)], truth[1:len(recv)], strict=False))
        itl_client.extend((b - a) / 1e6 for a, b in zip(recv, recv[1:], strict=False))
        if rid in starts and recv:
            ttft_true.append((truth[0] - starts[rid]) / 1e6)
            ttft_client.append((recv[0] - starts[rid]) / 1e6)
    window = [t for ts in sent.values() for t in ts if w0 * 1e9 <= t <= w1 * 1e9]
    latency = json.loads(Path(f"{prefix}_latency.json").read_text())["metrics"]
    summary = json.loads(Path(f"{prefix}_summary.json").read_text())
    client = summary.get("client", {})
    client = client.get("generators", client)
    spent = (client.get("budget_by_level") or {}).get(str(cfg.streams), {})
    running_in = [v for t, v in running if w0 <= t <= w1]
    chunks_in = len(window)
    return Result(
        cfg=cfg,
        err_p50=pct(errors, 50), err_p99=pct(errors, 99), err_max=max(errors, default=float("nan")),
        itl_rep=(latency["itl"]["all"]["p50"], latency["itl"]["all"]["p99"]),
        itl_true=(pct(itl_true, 50), pct(itl_true, 99)),
        ttft_rep=(latency["ttft"]["all"]["p50"], latency["ttft"]["all"]["p99"]),
        ttft_true=(pct(ttft_true, 50), pct(ttft_true, 99)),
        ttft_server_mean=srv_ttft,
        ttft_client_mean=sum(ttft_client) / len(ttft_client) if ttft_client else float("nan"),
        chunks_s=chunks_in / (w1 - w0),
        cpu_us_chunk=(cpu1 - cpu0) / max(chunks_in, 1) * 1e6,
        cpu_pct=(cpu1 - cpu0) / (w1 - w0) * 100.0,
        lag_max_ms=float(client.get("max_loop_lag_ms", float("nan"))),
        lag_late=int(client.get("loop_lag_late_samples", -1)),
        lag_samples=int(client.get("loop_lag_samples", -1)),
        running=sum(running_in) / len(running_in) if running_in else float("nan"),
        matched=len(errors), unmatched=unmatched,
        budget_share=float(spent.get("cpu_share", float("nan"))),
        budget_us=float(spent.get("cpu_us_per_chunk") or float("nan")),
        late_steps=late_steps,
    )


def steady_cpu(loc: subprocess.Popen, seconds: float, warmup_s: float, tail_s: float
               ) -> tuple[float, float, float, float]:
    """A `seconds` run's CPU seconds and wall clock (unix) at the start and the end of its steady window."""
    proc = psutil.Process(loc.pid)
    time.sleep(warmup_s)
    cpu0, w0 = _cpu(proc), time.time()
    time.sleep(max(0.0, seconds - warmup_s - tail_s))
    return cpu0, w0, _cpu(proc), time.time()


def _cpu(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    total = t.user + t.system
    for child in proc.children(recursive=True):  # taskset execs, so this is normally empty
        try:
            ct = child.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += ct.user + ct.system
    return total


@dataclass
class PeerResult:
    streams: int
    step_ms: float
    ttft: tuple[float, float]
    itl: tuple[float, float]
    itl_true: tuple[float, float]
    ttft_server_mean: float
    ttft_mean: float
    running: float


def run_vllm_bench(exe: str, tokenizer: Path, streams: int, step_ms: float, seconds: float,
                   work: Path) -> PeerResult:
    """`vllm bench serve` on the same server and load: its TTFT/ITL beside the send log's truth."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    tag = f"vllm-{streams}-{step_ms:g}"
    send_log = work / f"send-{tag}.csv"
    sim = start_server(port, send_log, streams, step_ms)
    rounds = max(2, round(seconds / (MAX_TOKENS * step_ms / 1000.0)))
    try:
        wait_http(url + "/health", sim)
        running: list[tuple[float, float]] = []
        stop = threading.Event()
        scraper = threading.Thread(target=scrape_running, args=(url, running, stop), daemon=True)
        scraper.start()
        cmd = [exe, "bench", "serve", "--backend", "openai-chat", "--base-url", url, "--endpoint",
               "/v1/chat/completions", "--model", "sim-8b", "--tokenizer", str(tokenizer), "--dataset-name",
               "random", "--random-input-len", "16", "--random-output-len", str(MAX_TOKENS), "--ignore-eos",
               "--num-prompts", str(streams * rounds), "--max-concurrency", str(streams),
               "--percentile-metrics", "ttft,itl", "--metric-percentiles", "50,99", "--disable-tqdm",
               "--save-result", "--result-dir", str(work), "--result-filename", f"{tag}.json"]
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        done = subprocess.run(pinned(cmd, "1"), cwd=work, env=env, capture_output=True, text=True,
                              timeout=600)
        stop.set()
        scraper.join()
        srv_ttft, _ = server_counters(url)
    finally:
        sim.terminate()
        sim.wait(30)
    if done.returncode != 0:
        raise RuntimeError(f"vllm bench serve exited {done.returncode}: {done.stderr[-1500:]}")
    res = json.loads((work / f"{tag}.json").read_text())
    sent = read_send_log(send_log).values()
    gaps = [(b - a) / 1e6 for ts in sent for a, b in zip(ts, ts[1:], strict=False)]
    busy = [v for _, v in running if v > 0]
    return PeerResult(streams, step_ms, (res["median_ttft_ms"], res["p99_ttft_ms"]),
                      (res["median_itl_ms"], res["p99_itl_ms"]), (pct(gaps, 50), pct(gaps, 99)), srv_ttft,
                      res["mean_ttft_ms"], sum(busy) / len(busy) if busy else float("nan"))


def print_peer(peers: list[PeerResult]) -> None:
    print("\nvllm bench serve on the same server and load (its own runs; TTFT truth needs per-request ids, "
          "which it does not log: beside it, the server's own TTFT mean).")
    rows = [("streams", "step", "ITL p50 rep/true", "ITL p99 rep/true", "TTFT p50", "TTFT p99",
             "TTFT mean it/srv", "server running")]
    for p in peers:
        rows.append((str(p.streams), f"{p.step_ms:g}", _pair(p.itl[0], p.itl_true[0]),
                     _pair(p.itl[1], p.itl_true[1]), f"{p.ttft[0]:.2f}", f"{p.ttft[1]:.2f}",
                     f"{p.ttft_mean:.2f}/{p.ttft_server_mean:.2f}", f"{p.running:.1f} of {p.streams}"))
    _table(rows)


def vllm_tokenizer() -> Path | None:
    """The real-vLLM tier's tiny Llama folder: a local tokenizer for vllm bench's random prompts."""
    root = Path.home() / ".cache" / "locust-spec" / "vllm-0.32.0"
    found = sorted(root.glob("models-*/target/tokenizer.json"))
    return found[0].parent if found else None


def vllm_bench() -> str | None:
    """`vllm` from the real-vLLM tier's environment, when it has been provisioned."""
    for root in (Path.home() / ".cache" / "locust-spec" / "vllm-0.32.0" / "venv",
                 Path.home() / ".cache" / "locust-spec" / "venv"):
        exe = root / "bin" / "vllm"
        if exe.exists():
            return str(exe)
    return shutil.which("vllm")


def print_tables(results: list[Result]) -> None:
    print("\nAccuracy (ms). ts err = client receive time - server send time, per token chunk. rep = what we "
          "report (PREFIX_latency.json), true = from the send log.\nTTFT true = server's first token-chunk "
          "send - our clock just before the request bytes went out; TTFT mean srv = spec-sim's own\n"
          "vllm:time_to_first_token_seconds (engine arrival to first token), beside our mean.")
    rows = [("client", "streams", "step", "run", "ts err p50", "p99", "max", "ITL p50 rep/true",
             "ITL p99 rep/true", "TTFT p50 rep/true", "TTFT p99 rep/true", "TTFT mean us/srv")]
    for r in results:
        c = r.cfg
        rows.append((c.client, str(c.streams), f"{c.step_ms:g}", str(c.repeat), f"{r.err_p50:.3f}",
                     f"{r.err_p99:.3f}", f"{r.err_max:.2f}", _pair(r.itl_rep[0], r.itl_true[0]),
                     _pair(r.itl_rep[1], r.itl_true[1]), _pair(r.ttft_rep[0], r.ttft_true[0]),
                     _pair(r.ttft_rep[1], r.ttft_true[1]),
                     f"{r.ttft_client_mean:.2f}/{r.ttft_server_mean:.2f}"))
    _table(rows)
    print("\nCapacity (steady window). running = spec-sim's vllm:num_requests_running, mean of 0.5 s "
          "scrapes; lag = the plugin's loop-lag summary; own budget = what the plugin itself reports in "
          "PREFIX_summary.json (budget_by_level, whole level).")
    rows = [("client", "streams", "step", "run", "chunks/s", "CPU us/chunk", "client CPU %",
             "own budget CPU % / us/chunk", "lag max ms", "late/samples", "server running",
             "server late steps", "matched chunks")]
    for r in results:
        c = r.cfg
        rows.append((c.client, str(c.streams), f"{c.step_ms:g}", str(c.repeat), f"{r.chunks_s:,.0f}",
                     f"{r.cpu_us_chunk:.1f}", f"{r.cpu_pct:.0f}",
                     f"{r.budget_share * 100:.0f} / {r.budget_us:.1f}", f"{r.lag_max_ms:.1f}",
                     f"{r.lag_late}/{r.lag_samples}", f"{r.running:.1f} of {c.streams} "
                     f"({r.running / c.streams:.1%})", str(r.late_steps),
                     f"{r.matched}" + (f" (+{r.unmatched} unmatched)" if r.unmatched else "")))
    _table(rows)


def _pair(reported: float, true: float) -> str:
    return f"{reported:.2f}/{true:.2f} (x{reported / true:.2f})" if true else f"{reported:.2f}/-"


def _table(rows: list[tuple[str, ...]]) -> None:
    print("| " + " | ".join(rows[0]) + " |")
    print("|" + "---|" * len(rows[0]))
    for row in rows[1:]:
        print("| " + " | ".join(row) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="16 and 256 streams, 10 ms, default client, once, no vllm bench")
    ap.add_argument("--streams", default="1,16,64,256")
    ap.add_argument("--steps", default="10,2", help="decode step times in ms")
    ap.add_argument("--clients", default="fast,openai", help="fast (default client) and/or openai")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--server", choices=("pacer", "sim"), default="pacer",
                    help="pacer: exact fixed steps, cheap enough for 256 streams on one core (default); sim: "
                         "spec-sim with its roofline calibrated to the step")
    ap.add_argument("--keep", type=Path, help="keep logs and traces in this folder")
    ap.add_argument("--no-vllm", action="store_true", help="skip vllm bench serve even where it is installed")
    ap.add_argument("--realtime", action="store_true",
                    help="run server and client under SCHED_RR (chrt), ahead of other work on a shared "
                         "machine; the kernel's RT throttling still leaves others 5 %% of each core")
    args = ap.parse_args()
    SERVER[0] = args.server
    if args.realtime:
        REALTIME.extend(["chrt", "--rr", "1"])
    if args.quick:
        args.streams, args.steps, args.clients, args.repeats, args.seconds = "16,256", "10", "fast", 1, 10.0
        args.no_vllm = True
    if (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {0})  # the orchestrator (scrapes, bookkeeping) shares the server's core
    server = "pacer (fixed steps)" if args.server == "pacer" else f"spec-sim {GPU} {MODEL}"
    print(f"load: {os.getloadavg()}  cores: {os.cpu_count()}  server: {server}, {MAX_TOKENS} tokens "
          f"per request (ignore_eos), {args.seconds:g} s per run, steady window excludes the first "
          f"{WARMUP_S:g} s and last {TAIL_S:g} s; realtime priority: {'yes' if args.realtime else 'no'}")
    bench, tokenizer = vllm_bench(), vllm_tokenizer()
    found = f"found at {bench}" if bench and tokenizer else "not available (no vLLM environment here)"
    print(f"vllm bench serve: {found}{' (skipped: --no-vllm)' if args.no_vllm else ''}")
    work = args.keep or Path(tempfile.mkdtemp(prefix="fidelity-"))
    work.mkdir(parents=True, exist_ok=True)
    results = []
    for step in (float(s) for s in args.steps.split(",")):
        for client in args.clients.split(","):
            for streams in (int(s) for s in args.streams.split(",")):
                for repeat in range(1, args.repeats + 1):
                    cfg = Config(streams, step, client, repeat)
                    r = run_one(cfg, args.seconds, work)
                    print(f"  {client} {streams} streams {step:g} ms #{repeat}: ts err p99 "
                          f"{r.err_p99:.3f} ms, {r.chunks_s:,.0f} chunks/s, {r.cpu_us_chunk:.1f} us/chunk, "
                          f"load {os.getloadavg()[0]:.2f}", flush=True)
                    results.append(r)
    print_tables(results)
    if bench and tokenizer and not args.no_vllm:
        peers = []
        for streams in (int(s) for s in args.streams.split(",")):
            try:
                peers.append(run_vllm_bench(bench, tokenizer, streams, 10.0, args.seconds, work))
            except (RuntimeError, OSError, KeyError, ValueError, subprocess.TimeoutExpired) as e:
                print(f"vllm bench serve at {streams} streams failed: {str(e).splitlines()[-1:]}")
        print_peer(peers)
    if args.keep is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
