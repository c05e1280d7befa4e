"""vLLM V1 Prometheus metrics (names, labels, buckets as vLLM 0.32), in a fresh registry per engine life."""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter

from prometheus_client import CollectorRegistry, Gauge, Histogram, generate_latest
from prometheus_client import Counter as PromCounter
from prometheus_client.openmetrics import exposition as openmetrics

# Bucket bounds as exposed by vLLM 0.32 (read off the reference /metrics captures).
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
               40.0, 80.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
               480.0, 960.0, 1920.0, 7680.0)
FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")
BASE = ("engine", "model_name")


def _observe_many(child, value: float, n: int) -> None:
    """n observations of one value at once. Every request that emitted in the previous step has the same
    inter-token gap, so a 256-stream step has one or two distinct values: this saves ~250 lock round trips
    per step. Uses the histogram child's bucket list (prometheus-client's internal layout)."""
    child._buckets[bisect_left(child._upper_bounds, value)].inc(n)
    child._sum.inc(value * n)


class SimMetrics:
    """The families spec-sim exposes; spec families exist only when speculation is configured."""

    def __init__(self, model_name: str, num_spec_tokens: int = 0):
        self.registry = CollectorRegistry()
        reg = self.registry
        labels = {"engine": "0", "model_name": model_name}
        self._labels = labels

        def counter(name: str, doc: str, extra: tuple[str, ...] = ()) -> PromCounter:
            return PromCounter(name, doc, (*BASE, *extra) if extra else BASE, registry=reg)

        if num_spec_tokens:
            spec = "vllm:spec_decode_num_"
            self.drafts = counter(spec + "drafts", "Number of spec decoding drafts.").labels(**labels)
            self.draft_tokens = counter(spec + "draft_tokens", "Number of draft tokens.").labels(**labels)
            self.accepted = counter(spec + "accepted_tokens", "Number of accepted tokens.").labels(**labels)
            per_pos = counter("vllm:spec_decode_num_accepted_tokens_per_pos",
                              "Accepted tokens per draft position.", ("position",))
            self.per_pos = [per_pos.labels(position=str(i), **labels) for i in range(num_spec_tokens)]
        self.running = Gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
                             BASE, registry=reg).labels(**labels)
        self.waiting = Gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
                             BASE, registry=reg).labels(**labels)
        self.kv_usage = Gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
                              BASE, registry=reg).labels(**labels)
        self.prompt_tokens = counter("vllm:prompt_tokens",
                                     "Number of prefill tokens processed.").labels(**labels)
        self.generation_tokens = counter("vllm:generation_tokens",
                                         "Number of generation tokens processed.").labels(**labels)
        self.prefix_queries = counter("vllm:prefix_cache_queries",
                                      "Prefix cache queries, in terms of number of queried tokens.")
        self.prefix_queries = self.prefix_queries.labels(**labels)
        self.prefix_hits = counter("vllm:prefix_cache_hits",
                                   "Prefix cache hits, in terms of number of cached tokens.").labels(**labels)
        success = counter("vllm:request_success", "Count of successfully processed requests.",
                          ("finished_reason",))
        self.success = {r: success.labels(finished_reason=r, **labels) for r in FINISH_REASONS}

        def histogram(name: str, doc: str, buckets: tuple[float, ...]):
            return Histogram(name, doc, BASE, buckets=buckets, registry=reg).labels(**labels)

        self.ttft = histogram("vllm:time_to_first_token_seconds",
                              "Histogram of time to first token in seconds.", TTFT_BUCKETS)
        self.itl = histogram("vllm:inter_token_latency_seconds",
                             "Histogram of inter-token latency in seconds.", ITL_BUCKETS)
        self.tpot = histogram("vllm:request_time_per_output_token_seconds",
                              "Histogram of time_per_output_token_seconds per request.", ITL_BUCKETS)
        self.e2e = histogram("vllm:e2e_request_latency_seconds",
                             "Histogram of e2e request latency in seconds.", E2E_BUCKETS)
        self.inference = histogram("vllm:request_inference_time_seconds",
                                   "Histogram of time spent in RUNNING phase for request.", E2E_BUCKETS)
        self.num_spec_tokens = num_spec_tokens

    def step(self, gen: int, prompt: int, cached: int, itls: list[float], drafts: int, draft_tokens: int,
             accepted: int, per_pos: list[int], *, running: int, waiting: int, kv_usage: float) -> None:
        """Everything one engine step changes (one ITL observation per request chunk, as vLLM)."""
        if gen:
            self.generation_tokens.inc(gen)
        if prompt:
            self.prompt_tokens.inc(prompt)
            self.prefix_queries.inc(prompt)
            if cached:
                self.prefix_hits.inc(cached)
        for v, n in Counter(itls).items():
            _observe_many(self.itl, v, n)
        if drafts and self.num_spec_tokens:
            self.drafts.inc(drafts)
            self.draft_tokens.inc(draft_tokens)
            self.accepted.inc(accepted)
            for child, n in zip(self.per_pos, per_pos, strict=True):
                if n:
                    child.inc(n)
        self.running.set(running)
        self.waiting.set(waiting)
        self.kv_usage.set(kv_usage)

    def finish(self, reason: str, e2e: float, tpot: float, inference: float) -> None:
        """`inference`: seconds since the request was scheduled (vLLM's RUNNING phase)."""
        self.success[reason].inc()
        self.e2e.observe(e2e)
        self.tpot.observe(tpot)
        self.inference.observe(inference)

    def exposition(self, as_openmetrics: bool = False) -> bytes:
        """Prometheus text as vLLM's Python frontend writes it, or OpenMetrics 1.0 as its Rust frontend
        (`VLLM_USE_RUST_FRONTEND=1`) serves it whatever Accept asks for."""
        if not as_openmetrics:
            return generate_latest(self.registry)
        try:  # vLLM's names keep their colon; newer prometheus-client would escape it to `_` by default
            return openmetrics.generate_latest(self.registry, escaping=openmetrics.ALLOWUTF8)
        except (TypeError, AttributeError):  # before 0.22: no escaping, colons kept
            return openmetrics.generate_latest(self.registry)
