"""spec-sim command line: parse the options, build engine and server, serve until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import difflib
import gc
import os
import re
import signal
import sys
from pathlib import Path
from typing import NoReturn

import gevent
import orjson

from locust_spec.sim import roofline
from locust_spec.sim.drafters import parse_spec_config
from locust_spec.sim.engine import Engine, EngineConfig
from locust_spec.sim.faults import FaultConfig
from locust_spec.sim.metrics import SimMetrics
from locust_spec.sim.model import tokenizer, warm
from locust_spec.sim.power import power_model
from locust_spec.sim.sendlog import FORMAT, SendLog
from locust_spec.sim.server import ServerOptions, SimServer, serve


def _rate(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"a rate must be within 0..1, got {text}")
    return value


ADMIN_ENV = "SPEC_SIM_ADMIN_TOKEN"
DESCRIPTION = """A simulated vLLM server, to try locust-spec (and test it) without a GPU.

It answers like `vllm serve`: streamed and plain /v1/chat/completions, /v1/models, /tokenize, /health, and
a Prometheus /metrics with vLLM's counters, speculative decoding's included. Step times come from a
roofline model of --gpu and --model-size; a --speculative-config (n-gram, or a draft model) drafts and
verifies tokens as vLLM would, so acceptance depends on the prompts. `make ab` runs two of them
(speculation off, and n-gram on).

  spec-sim --port 8000 --speculative-config '{"method": "ngram", "num_speculative_tokens": 4}'
"""


class _Help(argparse.RawDescriptionHelpFormatter):
    """The description as written, and each option's default where it has one."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        unset = action.default is None or action.default is False or action.default in ("", argparse.SUPPRESS)
        if not unset and "%(default)" not in text:  # 0 is a default, False (a flag's) is not
            text += " (default: %(default)s)"
        return text


class _Parser(argparse.ArgumentParser):
    """A usage error as the line that matters and its fix: argparse printed the whole 17-line usage first,
    and a typo needs only the option it meant (as spec-ab and spec-verdict answer one)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message}{self._did_you_mean(message)}\n"
                     f"Try '{self.prog} --help' for the options.\n")

    def _did_you_mean(self, message: str) -> str:
        unknown = re.findall(r"(--[\w-]+)", message.partition("unrecognized arguments:")[2])
        known = [o for action in self._actions for o in action.option_strings if o.startswith("--")]
        close = [m for u in unknown for m in difflib.get_close_matches(u.partition("=")[0], known, n=1)]
        return f" (did you mean {', '.join(close)}?)" if close else ""


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="spec-sim", description=DESCRIPTION, epilog=FORMAT, formatter_class=_Help)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on")
    p.add_argument("--port", type=int, default=8000, help="port to listen on (0: any free one)")
    p.add_argument("--served-model-name", default="sim-8b", help="the model's name in the API")
    p.add_argument("--speculative-config", default="", help="vLLM's JSON (default: speculation off), e.g. "
                   '\'{"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 4}\'; '
                   "methods ngram, draft_model (eagle, eagle3, mtp: the same model of a draft), with vLLM's "
                   "num_speculative_tokens_per_batch_size and rejection_sample_method 'synthetic' "
                   "(synthetic_acceptance_length or _rates)")
    p.add_argument("--max-num-seqs", type=int, default=256, help="running requests at most; others wait")
    p.add_argument("--max-model-len", type=int, default=8192, help="context: prompt plus max_tokens at most")
    p.add_argument("--time-scale", type=float, default=1.0,
                   help="multiply every step time (0.1 runs ten times faster than the modelled GPU)")
    p.add_argument("--fixed-step-ms", type=float, default=0.0, metavar="MS",
                   help="every engine step lasts MS wall milliseconds whatever the batch, prefill or "
                        "speculation (--time-scale does not apply): a known clock for client-fidelity checks")
    p.add_argument("--gpu", choices=sorted(roofline.GPUS), default="h100", help="the GPU modelled")
    p.add_argument("--model-size", default="8b", help="1b, 3b, 8b, 70b or a size in billions of parameters")
    p.add_argument("--gpu-power", metavar="IDLE,BUSY",
                   help="watts the modelled GPU draws idle and while stepping, served as a DCGM exporter's "
                        "series at /metrics/dcgm (default: the --gpu's board power busy, 15%% of it idle; "
                        "divided by --time-scale)")
    p.add_argument("--draft-size", default="1b", help="draft model size for method draft_model")
    p.add_argument("--send-log", type=Path, help="CSV of arrivals and chunks sent (format below)")
    p.add_argument("--per-request-spec-decode-metrics", choices=["detailed"],
                   help="add metrics.speculative_decoding to responses, as vLLM")
    p.add_argument("--accept-wrong-drafts", type=_rate, default=0.0, metavar="RATE",
                   help="a lossy verifier (as vLLM 0.33's rejection_sample_method 'fly', or a broken draft "
                        "setup): accept each draft token the target disagrees with at this rate, so the "
                        "answers differ from those without speculation (spec-verdict's answer gate)")
    p.add_argument("--grammar-disables-spec", action="store_true",
                   help="requests with response_format decode without speculation (silent fallback)")
    p.add_argument("--metrics-format", choices=("prometheus", "openmetrics"), default="prometheus",
                   help="/metrics as vLLM's Python frontend writes it (Prometheus text), or as its Rust "
                        "frontend (VLLM_USE_RUST_FRONTEND=1) serves it whatever Accept asks: OpenMetrics 1.0")
    p.add_argument("--seed", type=int, default=0, help="of the generated text and the faults")
    p.add_argument("--idle-timeout", type=float, default=65.0, metavar="SECONDS",
                   help="close a connection that sent no complete request for this long")
    f = p.add_argument_group("faults (rates 0..1 per request)")
    f.add_argument("--fault-500", type=_rate, default=0.0, help="an HTTP 500 instead of the answer")
    f.add_argument("--fault-429", type=_rate, default=0.0, help="429 with Retry-After")
    f.add_argument("--fault-reset", type=_rate, default=0.0, help="connection reset mid-stream")
    f.add_argument("--fault-malformed", type=_rate, default=0.0, help="a malformed SSE line mid-stream")
    f.add_argument("--fault-stall", type=_rate, default=0.0, help="a stall of --stall-seconds mid-stream")
    f.add_argument("--stall-seconds", type=float, default=30.0, help="how long a --fault-stall stalls")
    f.add_argument("--stall-at-token", type=int, default=1,
                   help="the stall starts after this many tokens were sent (0: before the first, so not even "
                        "the role chunk, which vLLM sends with the first token, goes out)")
    f.add_argument("--fault-no-done", type=_rate, default=0.0, help="stream ends without data: [DONE]")
    f.add_argument("--restart-after", type=float, default=0.0,
                   help="simulate a restart every SECONDS (connections drop, counters reset); "
                        f"POST /admin/restart does the same (with Authorization: Bearer ${ADMIN_ENV})")
    return p


def _watch_schedule(engine: Engine, every_s: float = 10.0) -> None:
    """Say so when the sim cannot keep its own schedule (its timings then overstate the modelled GPU's)."""
    steps = late = 0
    while True:
        gevent.sleep(every_s)
        s = engine.schedule
        window, window_late = s.steps - steps, s.late_steps - late
        steps, late = s.steps, s.late_steps
        if window and window_late > 0.1 * window:
            print(f"spec-sim: behind schedule: {window_late} of {window} steps late by >20% of a step in the "
                  f"last {every_s:.0f} s (CPU-starved: raise --time-scale or give the sim a free core)",
                  file=sys.stderr, flush=True)


def _restart_every(sim: SimServer, seconds: float) -> None:
    while True:
        gevent.sleep(seconds)
        sim.restart()


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    try:
        spec = parse_spec_config(orjson.loads(args.speculative_config)) if args.speculative_config else None
        model = roofline.model_for(args.model_size)
        draft = roofline.model_for(args.draft_size)
    except (ValueError, orjson.JSONDecodeError) as e:
        sys.exit(f"spec-sim: {e}")
    if args.time_scale <= 0:
        sys.exit("spec-sim: --time-scale must be positive")
    try:
        gpu_power = power_model(roofline.GPUS[args.gpu], args.gpu_power, args.time_scale)
    except ValueError as e:
        sys.exit(f"spec-sim: {e}")
    if args.fixed_step_ms < 0:
        sys.exit("spec-sim: --fixed-step-ms must not be negative")
    if args.idle_timeout <= 0:
        sys.exit("spec-sim: --idle-timeout must be positive")
    tok = tokenizer()
    warm()
    # The corpus tables are permanent: keep the cyclic GC from walking them on every full collection.
    gc.freeze()
    use_draft = draft if spec and spec.method == "draft_model" else None
    cfg = EngineConfig(roofline.GPUS[args.gpu], model, spec, use_draft, args.max_num_seqs, args.time_scale,
                       args.fixed_step_ms / 1000.0, args.accept_wrong_drafts)
    engine = Engine(cfg, tok, SimMetrics(args.served_model_name, spec.num_speculative_tokens if spec else 0))
    faults = FaultConfig(args.fault_500, args.fault_429, args.fault_reset, args.fault_malformed,
                         args.fault_stall, args.fault_no_done, args.stall_seconds, args.stall_at_token)
    detailed = args.per_request_spec_decode_metrics == "detailed"
    opts = ServerOptions(args.served_model_name, args.max_model_len, detailed, args.grammar_disables_spec,
                         faults, args.seed, args.idle_timeout, os.environ.get(ADMIN_ENV) or None,
                         args.metrics_format == "openmetrics", gpu_power)
    send_log = SendLog(args.send_log) if args.send_log else None
    sim = SimServer(engine, opts, send_log)
    srv = serve(sim, args.host, args.port)
    engine.start()
    gevent.spawn(_watch_schedule, engine)
    if args.restart_after > 0:
        gevent.spawn(_restart_every, sim, args.restart_after)
    for sig in (signal.SIGTERM, signal.SIGINT):
        gevent.signal_handler(sig, srv.stop, 1)
    print(f"spec-sim: serving {args.served_model_name} on http://{args.host}:{srv.server_port} "
          f"(gpu {args.gpu}, model {model.name}, speculation {spec.method if spec else 'off'})", flush=True)
    try:
        srv.serve_forever()
    finally:
        if send_log:
            send_log.close()
        print(f"spec-sim: stopped; schedule {orjson.dumps(engine.schedule.as_dict()).decode()}", flush=True)
