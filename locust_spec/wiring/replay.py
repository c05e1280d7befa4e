"""Trace replay (`--trace FILE`): an open loop whose arrivals are a public serving trace's times and whose
prompts are real text at each row's length (docs/traces.md).

The master (or the single process) reads the trace and plans one level from it: the trace's times as the
arrival plan (core/arrivals.py, arrival `trace`), shared across the processes as a rate's arrivals are,
arrival j on slot j mod N, with the same lateness ledger. Every load-generating process reads the same file
with the same options, so arrival j's prompt is row j's, built from the seed alone (core/trace_text.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from locust_spec.core.arrivals import MAX_RATE, TRACE, ArrivalPlan
from locust_spec.core.formats import Prompt
from locust_spec.core.level import Level
from locust_spec.core.trace_text import DEFAULT_BLOCK_TOKENS, Corpus, builtin_corpus, trace_prompt
from locust_spec.core.traces import FORMATS, Trace, Window, parse_speedup, parse_window, read_trace
from locust_spec.wiring.openloop import slots
from locust_spec.wiring.options import validated


def parse_block_tokens(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"a trace block is a whole number of tokens, 1 or more: {text!r}")
    return value


@dataclass(frozen=True)
class TraceSettings:
    """The trace a run replays and how: `--trace`, `--trace-format`, `--trace-window`, `--trace-speedup`,
    `--trace-block-tokens`."""

    path: str
    fmt: str | None = None
    window: Window = Window()
    speedup: float = 1.0
    block_tokens: int = DEFAULT_BLOCK_TOKENS

    @classmethod
    def from_options(cls, options) -> TraceSettings | None:
        """None without `--trace`; ValueError beside `--rate` or `--rates` (a trace brings its own times)."""
        path = getattr(options, "trace", None)
        if not path:
            return None
        if getattr(options, "rate", None) or getattr(options, "rates", None):
            raise ValueError("--trace replays the trace's own arrival times: leave out --rate and --rates")
        window = getattr(options, "trace_window", None)
        return cls(str(path), getattr(options, "trace_format", None) or None,
                   parse_window(window) if window else Window(),
                   parse_speedup(str(getattr(options, "trace_speedup", 1) or 1)),
                   parse_block_tokens(str(getattr(options, "trace_block_tokens", DEFAULT_BLOCK_TOKENS))))

    def read(self) -> Trace:
        return read_trace(self.path, self.fmt, self.window, self.speedup)


def trace_rate(trace: Trace) -> float:
    """A trace level's rate, its name in every per-level table: the rows over the replay's seconds (4
    significant digits; a trace whose rows all come at once: their count), at most the most a rate may
    ask (a burst of rows a microsecond apart is named for that, its times kept)."""
    rate = len(trace.rows) / trace.duration_s if trace.duration_s > 0 else float(len(trace.rows))
    return min(float(f"{rate:.4g}"), MAX_RATE)


def trace_level(runner, trace: Trace, seed: int, users: int, lead_s: float = 0.0) -> Level:
    """The one level of a replay, starting `lead_s` from now on `runner`: the trace's times for the
    processes present, no warm-up (every row of the trace is measured)."""
    start = time.time() + lead_s
    plan = ArrivalPlan(trace_rate(trace), TRACE, seed=seed, start_unix_s=start, slots=slots(runner),
                       times=tuple(row.offset_s for row in trace.rows))
    return Level(users, start, plan)


class TracePrompts:
    """One process's trace and corpus: arrival j is sent as row j's prompt (built when it is sent, so a
    long trace's text is never held whole)."""

    def __init__(self, settings: TraceSettings, seed: int, corpus: Corpus | None = None) -> None:
        self.settings = settings
        self.trace = settings.read()
        self.corpus = corpus or builtin_corpus()
        self.seed = seed

    def prompt(self, arrival_index: int) -> Prompt:
        row = self.trace.rows[arrival_index]
        return trace_prompt(row, self.corpus, self.seed, self.settings.block_tokens)


def add_options(parser) -> None:
    parser.add_argument("--trace", default=None, include_in_web_ui=True,
                        help="Replay a serving trace (Mooncake/Bailian JSONL, Azure or BurstGPT CSV): "
                             "requests leave at its times (open loop, across every process), each prompt "
                             "real text at its row's input length, max_tokens its output length; Locust's "
                             "users are the requests that can be in flight at once (docs/traces.md)")
    parser.add_argument("--trace-format", choices=FORMATS, default=None, include_in_web_ui=True,
                        help="--trace: the file's format (default: told from its first line)")
    parser.add_argument("--trace-speedup", type=validated(parse_speedup), default="1", include_in_web_ui=True,
                        help="--trace: replay X times as fast (2: twice as fast; vLLM's "
                             "--timed-trace-sec-multiplier M, GuideLLM's time_scale T and SGLang's "
                             "--mooncake-slowdown-factor F are 1/M, 1/T, 1/F; AIPerf's "
                             "--fixed-schedule-speedup S is S) (default 1)")
    parser.add_argument("--trace-window", type=validated(parse_window), default=None, include_in_web_ui=True,
                        help="--trace: replay only START:END seconds of the trace (from its first row; "
                             "60: to its end), before the speedup")
    parser.add_argument("--trace-block-tokens", type=validated(parse_block_tokens),
                        default=str(DEFAULT_BLOCK_TOKENS), include_in_web_ui=True,
                        help="--trace: tokens of text per hash_ids block; rows sharing ids share those "
                             f"blocks (default {DEFAULT_BLOCK_TOKENS}, Mooncake's and Bailian's)")
