"""The scraper in a real `locust --headless` run against a loopback server serving real vLLM /metrics text."""

from __future__ import annotations

import csv
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from locust_spec.metrics.counters import snapshots_from_rows, spec_window
from locust_spec.metrics.crosscheck import cross_check, read_client_totals, warnings
from tests.support import REFERENCE, REPO, restart_sim, run_locust

CPU = REFERENCE / "vllm-0.32-cpu"
BEFORE = (CPU / "metrics_ngram_before.txt").read_bytes()
AFTER = (CPU / "metrics_ngram_after.txt").read_bytes()


def sample_lines(text: bytes) -> int:
    return sum(1 for line in text.decode().splitlines() if line and not line.startswith("#"))


LOCUSTFILE = str(REPO / "tests" / "e2e" / "scraper_locustfile.py")
TOKEN = "s3cret-metrics-token-123"


class MetricsServer:
    """Serves `/` (200) and `/metrics`: the n-th scrape gets `answer(n)` = (status, body)."""

    def __init__(self, answer: Callable[[int], tuple[int, bytes]], token: str | None = None):
        self.answer = answer
        self.token = token
        self.log: list[tuple[str, int]] = []  # (path, status) in arrival order
        self.auth_ok = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                if self.path == "/metrics":
                    if owner.token and self.headers.get("Authorization") != f"Bearer {owner.token}":
                        status, body = 401, b"unauthorized"
                    else:
                        owner.auth_ok += bool(owner.token)
                        status, body = owner.answer(sum(p == "/metrics" for p, _ in owner.log))
                else:
                    status, body = 200, b"ok"
                owner.log.append((self.path, status))
                self.send_response(status)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def scrapes(self) -> list[int]:
        return [status for path, status in self.log if path == "/metrics"]

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def metrics_server() -> Iterator[Callable[..., MetricsServer]]:
    servers: list[MetricsServer] = []

    def start(answer, token=None) -> MetricsServer:
        servers.append(MetricsServer(answer, token))
        return servers[-1]

    yield start
    for s in servers:
        s.stop()


def before_then_after(n: int) -> tuple[int, bytes]:
    return 200, BEFORE if n == 0 else AFTER


def locust(server: MetricsServer, tmp: Path, *extra: str, seconds: int = 3, env=None):
    prefix = tmp / "run"
    proc = run_locust(
        ["-f", LOCUSTFILE, "--headless", "-u", "2", "-r", "2", "-t", f"{seconds}s", "--host", server.url,
         "--csv", str(prefix), "--metrics-interval", "1", "--only-summary", *extra],
        cwd=tmp, env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc, Path(f"{prefix}_server_metrics.csv")


def read_rows(path: Path) -> list[dict]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def test_scrapes_at_start_each_interval_and_stop_into_the_long_csv(metrics_server, tmp_path):
    server = metrics_server(before_then_after)
    _, path = locust(server, tmp_path, seconds=3)
    rows = read_rows(path)
    assert list(rows[0]) == ["timestamp_unix_s", "url", "metric", "labels", "value"]
    snaps = snapshots_from_rows(rows, keep_buckets=True)
    assert len(snaps) == len(server.scrapes())
    # Every sample of every scrape is a row, `_created` and histogram buckets included.
    sizes = [len(s.samples) for s in snaps]
    assert sizes == [sample_lines(BEFORE)] + [sample_lines(AFTER)] * (len(snaps) - 1)
    assert len(rows) == sum(len(s.samples) for s in snaps)
    assert {s.url for s in snaps} == {server.url + "/metrics"}
    times = [s.timestamp_unix_s for s in snaps]
    assert times == sorted(times) and len(set(times)) == len(times)
    # start + spawning complete + one per second for 3 s + stop; scraped per interval, not per request.
    assert 4 <= len(snaps) <= 8
    gets = sum(path == "/" for path, _ in server.log)
    assert gets > 2 * len(snaps)
    # The first scrape goes out with the load (started at test start, never holding the users back: its
    # request leaves with the users' first ones), the last follows it.
    paths = [p for p, _ in server.log]
    assert "/metrics" in paths[:3] and paths[-1] == "/metrics"
    w = spec_window(snaps, times[0], times[-1])
    assert (w.drafts, w.draft_tokens, w.accepted) == (1244, 4128, 2619)
    assert round(w.acceptance_rate, 3) == 0.634
    assert "vllm:spec_decode_num_drafts_created" in {s.metric for s in snaps[0].samples}
    per_pos = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
    labels = next(r["labels"] for r in rows if r["metric"] == per_pos)
    assert labels == "engine=0;model_name=tiny-llama;position=0"


def test_a_failed_scrape_leaves_a_gap_and_one_warning_line(metrics_server, tmp_path):
    def answer(n: int) -> tuple[int, bytes]:
        if n == 2:
            return 500, b"internal error"
        if n == 3:
            return 200, b"<html><body>502 Bad Gateway</body></html>"
        return before_then_after(n)

    server = metrics_server(answer)
    proc, path = locust(server, tmp_path, seconds=4)
    snaps = snapshots_from_rows(read_rows(path))
    assert len(server.scrapes()) >= 5
    assert len(snaps) == len(server.scrapes()) - 2
    warnings = [line for line in proc.stderr.splitlines() if "metrics scrape of" in line]
    assert len(warnings) == 2, warnings
    assert "HTTP 500" in warnings[0] and "no Prometheus samples" in warnings[1]
    assert "Traceback" not in proc.stderr
    assert spec_window(snaps, 0, 1e12).accepted == 2619


def test_unreachable_metrics_never_fails_the_run(tmp_path, metrics_server):
    server = metrics_server(before_then_after)
    proc, path = locust(server, tmp_path, "--metrics-url", "http://127.0.0.1:9/metrics", seconds=2)
    assert read_rows(path) == []
    assert "metrics scrape of http://127.0.0.1:9/metrics failed" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert server.scrapes() == []


def test_token_is_sent_but_never_logged_or_written(metrics_server, tmp_path):
    server = metrics_server(before_then_after, token=TOKEN)
    proc, path = locust(server, tmp_path, seconds=2, env={"LOCUST_SPEC_METRICS_TOKEN": TOKEN})
    assert server.auth_ok == len(server.scrapes()) >= 3
    assert 401 not in server.scrapes()
    for text in (proc.stdout, proc.stderr, path.read_text()):
        assert TOKEN not in text


def test_missing_token_is_one_warning_per_scrape_with_a_hint(metrics_server, tmp_path):
    server = metrics_server(before_then_after, token=TOKEN)
    proc, path = locust(server, tmp_path, seconds=2)
    assert set(server.scrapes()) == {401}
    assert "HTTP 401 (is a token needed? locust --metrics-token, or $LOCUST_SPEC_METRICS_TOKEN)" in \
        proc.stderr
    assert read_rows(path) == []


def test_metrics_off_scrapes_nothing(metrics_server, tmp_path):
    server = metrics_server(before_then_after)
    _, path = locust(server, tmp_path, "--metrics-url", "off", seconds=1)
    assert server.scrapes() == [] and not path.exists()


def test_several_replicas_are_scraped_and_summed(metrics_server, tmp_path):
    a, b = metrics_server(before_then_after), metrics_server(before_then_after)
    _, path = locust(a, tmp_path, "--metrics-url", a.url + "/metrics", "--metrics-url", b.url + "/metrics",
                     seconds=2)
    snaps = snapshots_from_rows(read_rows(path))
    assert {s.url for s in snaps} == {a.url + "/metrics", b.url + "/metrics"}
    w = spec_window(snaps, 0, 1e12)
    assert (w.drafts, w.accepted) == (2 * 1244, 2 * 2619)
    assert round(w.acceptance_rate, 3) == 0.634


NGRAM = '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}'
CHAT_LOCUSTFILE = str(REPO / "tests" / "e2e" / "scraper_chat_locustfile.py")


def chat_run(url: str, tmp: Path, seconds: int = 3):
    prefix = tmp / "run"
    proc = run_locust(
        ["-f", CHAT_LOCUSTFILE, "--headless", "-u", "4", "-r", "4", "-t", f"{seconds}s", "--host", url,
         "--csv", str(prefix), "--metrics-interval", "1", "--prompts", "code", "--max-tokens", "64",
         "--only-summary"],
        cwd=tmp,
    )
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return proc, prefix


def test_spec_sim_counters_agree_with_the_client(spec_sim, tmp_path):
    sim = spec_sim("--speculative-config", NGRAM, "--time-scale", "0.1",
                   "--per-request-spec-decode-metrics", "detailed")
    _, prefix = chat_run(sim.url, tmp_path)
    snaps = snapshots_from_rows(read_rows(Path(f"{prefix}_server_metrics.csv")))
    w = spec_window(snaps, 0, 1e12)
    assert w.server_kind == "vllm-v1" and w.resets == 0
    assert w.drafts > 0 and 0 < w.acceptance_rate <= 1
    assert len(w.per_position) == 4
    assert list(w.per_position) == sorted(w.per_position, reverse=True)
    totals = read_client_totals(Path(f"{prefix}_requests.csv"))
    assert totals.ok > 0
    assert warnings(cross_check(totals, w)) == []


def positive(cell: str | None) -> bool:
    """A cell of a row the scraper may still be writing (cut short, or no value yet)."""
    try:
        return float(cell or "0") > 0 and cell.endswith(".0")
    except ValueError:
        return False


def test_spec_sim_restart_mid_run_is_counted_and_flagged(spec_sim, tmp_path):
    sim = spec_sim("--speculative-config", NGRAM, "--time-scale", "0.1")
    # Restart the server once a scrape has seen drafts, so counts from before the restart exist.
    csv_path = tmp_path / "run_server_metrics.csv"

    def restart_after_first_drafts() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if csv_path.exists() and any(
                r["metric"] == "vllm:spec_decode_num_drafts_total" and positive(r.get("value"))
                for r in read_rows(csv_path)
            ):
                restart_sim(sim.url)
                return
            time.sleep(0.1)

    restart = threading.Thread(target=restart_after_first_drafts)
    restart.start()
    try:
        proc, prefix = chat_run(sim.url, tmp_path, seconds=5)
    finally:
        restart.join()
    snaps = snapshots_from_rows(read_rows(Path(f"{prefix}_server_metrics.csv")))
    w = spec_window(snaps, 0, 1e12)
    assert w.resets == 1, [line for line in proc.stderr.splitlines() if "metrics scrape" in line]
    assert any("reset 1 time" in n for n in w.notes)

    def drafts(name: str) -> list[float]:
        return [next(s.value for s in snap.samples if s.metric == name) for snap in snaps]

    total = drafts("vllm:spec_decode_num_drafts_total")
    created = drafts("vllm:spec_decode_num_drafts_created")
    after = next(i for i in range(1, len(snaps)) if created[i] != created[i - 1])
    assert total[after - 1] > 0
    # Everything counted before the restart, plus everything counted since; last minus first loses some.
    assert w.drafts == total[after - 1] - total[0] + total[-1]
    assert w.drafts > total[-1] - total[0]
