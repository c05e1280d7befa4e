"""The continuous-batching engine loop: every running request advances in one step, timed by the roofline."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import gevent
import gevent.event

from locust_spec.core import schedule
from locust_spec.sim import roofline
from locust_spec.sim.drafters import (
    NgramIndex,
    SpecConfig,
    draft_model_proposal,
    lossy_accepts,
    synthetic_accepted,
)
from locust_spec.sim.metrics import SimMetrics
from locust_spec.sim.model import EOS, Target
from locust_spec.sim.prefix_cache import BLOCK, PrefixCache
from locust_spec.sim.tokenizer import Tokenizer


@dataclass
class StepOutput:
    """What one step produced for one request: its new tokens, their text, and the finish reason if done."""

    tokens: int
    text: str
    finish: str | None = None
    stop_reason: str | None = None


@dataclass
class SpecStats:
    """Per-request speculative-decoding record, in the shape of vLLM's per-request metrics."""

    k: int
    accepted: list[int] = field(default_factory=list)
    drafted: list[int] = field(default_factory=list)

    def as_dict(self, *, streamed: bool) -> dict:
        """vLLM's shape; with no speculation step, vLLM omits the per-step lists from a streamed final
        chunk and sets them to null in a non-streamed response."""
        steps = len(self.accepted)
        acc, dr = sum(self.accepted), sum(self.drafted)
        hist = [0] * (self.k + 1)
        for a in self.accepted:
            hist[a] += 1
        out = {
            "mean_acceptance_length": 1 + acc / steps if steps else 1.0,
            "draft_acceptance_rate": acc / dr if dr else 0.0,
            "acceptance_histogram": hist,
            "num_spec_steps": steps,
            "num_accepted_draft_tokens": acc,
            "num_draft_tokens": dr,
            "num_spec_tokens": self.k,
        }
        if steps:
            out["per_step_accepted"] = list(self.accepted)
            out["per_step_drafted"] = list(self.drafted)
        elif not streamed:
            out["per_step_accepted"] = out["per_step_drafted"] = None
        return out


class Request:
    """One generation in the engine: its prompt, its target sequence, progress and delivery callback."""

    def __init__(self, rid: str, prompt: list[int], target: Target, max_tokens: int,
                 deliver: Callable[[Request, StepOutput], bool], *, stop: tuple[str, ...] = (),
                 speculate: bool = True, seed: int = 0, stall_at_token: int = -1, stall_s: float = 0.0):
        self.id = rid
        self.prompt = prompt
        self.target = target
        self.max_tokens = max_tokens
        self.deliver = deliver
        self.stop = stop
        self.speculate = speculate
        self.seed = seed
        self.stall_at_token = stall_at_token
        self.stall_s = stall_s
        self.generated = 0
        self.prefilled = False
        self.paused_until = 0.0
        self.arrival = time.perf_counter()
        self.scheduled_at = self.arrival
        self.first_token_at = 0.0
        self.last_emit_at = 0.0
        self.text_tail = ""
        self.cached_tokens = 0
        self.index: NgramIndex | None = None
        self.spec: SpecStats | None = None
        self.finished = False


# One request's share of a step: the request, its new tokens, drafts proposed, drafts accepted.
Planned = tuple[Request, list[int], int, int]


@dataclass(frozen=True)
class EngineConfig:
    """Engine settings: hardware, model, speculation, scheduling limits and the time acceleration."""

    gpu: roofline.Gpu
    model: roofline.ModelShape
    spec: SpecConfig | None = None
    draft: roofline.ModelShape | None = None
    max_num_seqs: int = 256
    time_scale: float = 1.0
    fixed_step_s: float = 0.0  # >0: every step lasts this many wall seconds, whatever it holds
    accept_wrong: float = 0.0
    """A lossy verifier: the chance a draft token the target disagrees with is accepted all the same."""


@dataclass
class ScheduleStats:
    """How well the loop kept its own schedule: lateness of each step's emission after its due time."""

    steps: int = 0
    late_steps: int = 0
    max_late_s: float = 0.0
    sum_late_s: float = 0.0
    sum_step_s: float = 0.0
    sum_busy_s: float = 0.0  # CPU time the loop spent planning and emitting
    max_batch: int = 0

    def as_dict(self) -> dict:
        n = max(1, self.steps)
        return {"steps": self.steps, "late_steps": self.late_steps, "max_late_ms": self.max_late_s * 1e3,
                "mean_late_ms": self.sum_late_s / n * 1e3, "mean_step_ms": self.sum_step_s / n * 1e3,
                "mean_cpu_ms": self.sum_busy_s / n * 1e3,
                "max_batch": self.max_batch}


class Engine:
    """Steps all running requests together; new requests wait when `max_num_seqs` are running."""

    def __init__(self, cfg: EngineConfig, tokenizer: Tokenizer, metrics: SimMetrics):
        self.cfg = cfg
        self.tok = tokenizer
        self.metrics = metrics
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.wake = gevent.event.Event()
        self.schedule = ScheduleStats()
        self.prefix_cache = PrefixCache(cfg.gpu.kv_capacity_tokens(cfg.model) // BLOCK)
        self._loop: gevent.Greenlet | None = None
        spec = cfg.spec
        # vLLM builds the batch -> k table once, at start, up to max_num_seqs.
        self._k_table = None
        if spec is not None and spec.per_batch_size is not None:
            self._k_table = schedule.dense(list(spec.per_batch_size), cfg.max_num_seqs,
                                           spec.num_speculative_tokens)
        # The k of the proposals verified in the next step: vLLM looks it up with the batch of the step
        # after which the proposer drafts.
        self.next_k = spec.num_speculative_tokens if spec is not None else 0
        self._stepping: tuple[float, float] | None = None
        """The step under way on the modelled GPU: its start (perf_counter) and length."""

    def start(self) -> None:
        self._loop = gevent.spawn(self._run)

    def submit(self, req: Request) -> None:
        if self.cfg.spec is not None and req.speculate:
            req.spec = SpecStats(self.cfg.spec.num_speculative_tokens)
            if self.cfg.spec.method == "ngram":
                req.index = NgramIndex(list(req.prompt), self.cfg.spec.prompt_lookup_min,
                                       self.cfg.spec.prompt_lookup_max)
        self.waiting.append(req)
        self.wake.set()

    def abort_all(self) -> list[Request]:
        dropped = [r for r in (*self.running, *self.waiting) if not r.finished]
        for r in dropped:
            r.finished = True
        self.running.clear()
        self.waiting.clear()
        return dropped

    def _admit(self, now: float) -> list[Request]:
        """Drop finished requests, admit waiting ones up to max_num_seqs; the ones to step now."""
        self.running = [r for r in self.running if not r.finished]
        while self.waiting and len(self.running) < self.cfg.max_num_seqs:
            r = self.waiting.popleft()
            if not r.finished:
                if r.stall_at_token == 0:
                    # Before its first step: vLLM sends the role chunk with the first token, so nothing
                    # at all reaches the client during this stall.
                    r.paused_until = now + r.stall_s
                    r.stall_at_token = -1
                r.scheduled_at = now
                self.running.append(r)
        return [r for r in self.running if r.paused_until <= now]

    def step_now(self, now: float) -> float:
        """One step computed and delivered at once (no waiting): the modelled GPU seconds it took.

        For what-if calculations and tests; the server's loop spaces the same steps out in real time.
        """
        active = self._admit(now)
        if not active:
            return 0.0
        plan, load, k = self._plan(active)
        self._emit(plan, now)
        return self._step_seconds(load, k)

    def _run(self) -> None:
        deadline = time.perf_counter()
        while True:
            now = time.perf_counter()
            active = self._admit(now)
            if not active:
                self.wake.clear()
                paused = [r.paused_until for r in self.running]
                self.wake.wait(timeout=(min(paused) - now) if paused else None)
                deadline = time.perf_counter()
                continue
            cpu = time.thread_time()
            plan, load, k = self._plan(active)
            dur = self.cfg.fixed_step_s or self._step_seconds(load, k) * self.cfg.time_scale
            # The next step starts when the previous one ended on the modelled GPU, not after this loop
            # finished writing (vLLM sends outputs from another process while the GPU runs on); only a
            # loop more than a step behind gives up catching up and slips.
            deadline = (now if now - deadline > dur else deadline) + dur
            self._stepping = (deadline - dur, dur)
            cpu = time.thread_time() - cpu
            gevent.sleep(max(0.0, deadline - time.perf_counter()))
            emit_at = time.perf_counter()
            cpu -= time.thread_time()
            self._emit(plan, emit_at)
            self._record_schedule(emit_at - deadline, dur, len(active), cpu + time.thread_time())
            self._stepping = None

    def busy_s(self, now: float) -> float:
        """Seconds the modelled GPU has stepped by `now` (perf_counter): the steps done and the part of the
        one under way, so that its modelled energy grows through a step, as a real GPU's does."""
        done = self.schedule.sum_step_s
        if self._stepping is None:
            return done
        start, dur = self._stepping
        return done + min(max(now - start, 0.0), dur)

    def _step_seconds(self, load: roofline.StepLoad, k: int) -> float:
        """`k`: the step's proposal length; at 0 (a schedule's off range) nothing is drafted or paid for."""
        spec = self.cfg.spec
        return roofline.step_seconds(self.cfg.gpu, self.cfg.model, load, spec.method if spec and k else "",
                                     self.cfg.draft, k)

    def _record_schedule(self, late: float, dur: float, batch: int, busy: float) -> None:
        s = self.schedule
        s.steps += 1
        s.sum_step_s += dur
        s.sum_busy_s += busy
        s.max_batch = max(s.max_batch, batch)
        if late > 0:
            s.sum_late_s += late
            s.max_late_s = max(s.max_late_s, late)
            if late > 0.2 * dur:
                s.late_steps += 1

    def _plan(self, active: list[Request]) -> tuple[list[Planned], roofline.StepLoad, int]:
        """Decide every request's tokens for this step (proposals verified against the target); the step's
        proposal length comes last."""
        step_k = self.next_k
        if self._k_table is not None:
            # Every request in the step counts, prefills included (vLLM: len(num_scheduled_tokens)).
            self.next_k = schedule.k_at(self._k_table, len(active))
        query = kv = pairs = 0
        plan = []
        spec = self.cfg.spec
        for r in active:
            if not r.prefilled:
                n = len(r.prompt)
                cached = self.prefix_cache.admit(r.prompt)
                r.cached_tokens = cached
                query += n - cached
                kv += cached
                pairs += n * (n + 1) // 2 - cached * (cached + 1) // 2
                plan.append((r, [r.target.token(0)], -1, 0))
                continue
            ctx = len(r.prompt) + r.generated
            drafts: list[int] = []
            room = r.max_tokens - r.generated - 1
            k = 0
            if r.spec is not None and room > 0:
                # Synthetic acceptance drafts the full k, as vLLM's draft heads do: what lies past
                # max_tokens is dropped from the answer, not from the counters.
                k = step_k if spec.synthetic_rates is not None else min(step_k, room)
                if k <= 0:
                    drafts = []
                elif r.index is not None:
                    drafts = r.index.propose(k)
                else:
                    drafts = draft_model_proposal(r.target.token, r.seed, r.generated, k, spec.agreement,
                                                  stop_at_eos=spec.synthetic_rates is None)
            accepted = self._accepted(r, drafts)
            # Accepted drafts are emitted as drafted: under a lossy or synthetic verifier they may not be
            # the target's tokens, and the answer changes.
            toks = [*drafts[:accepted], r.target.token(r.generated + accepted)]
            # The verifier runs k+1 positions for every speculating request: drafts are padded to a
            # [batch, k] tensor, so a short or empty proposal still costs the full verification.
            positions = k + 1
            query += positions
            kv += ctx
            pairs += positions * ctx
            plan.append((r, toks, len(drafts), accepted))
        return plan, roofline.StepLoad(len(active), query, kv, pairs), step_k

    def _accepted(self, r: Request, drafts: list[int]) -> int:
        """The drafts the verifier takes: the target's agreement (standard), with wrong ones taken at
        --accept-wrong-drafts' rate (lossy), or the configured rates whatever they are (synthetic)."""
        rates = self.cfg.spec.synthetic_rates if self.cfg.spec is not None else None
        if rates is not None:
            return synthetic_accepted(rates, len(drafts), r.seed, r.generated)
        accepted = 0
        while accepted < len(drafts) and (drafts[accepted] == r.target.token(r.generated + accepted)
                                          or lossy_accepts(self.cfg.accept_wrong, r.seed, r.generated,
                                                           accepted)):
            accepted += 1
        return accepted

    def _emit(self, plan: list[Planned], now: float) -> None:
        m = self.metrics
        gen = prompt = cached = 0
        drafts = draft_tokens = accepted_total = 0
        per_pos = [0] * (self.cfg.spec.num_speculative_tokens if self.cfg.spec else 0)
        itls = []
        for r, toks, n_draft, accepted in plan:
            if r.finished:
                continue
            if n_draft > 0:
                drafts += 1
                draft_tokens += n_draft
                accepted_total += accepted
                for j in range(accepted):
                    per_pos[j] += 1
                r.spec.accepted.append(accepted)
                r.spec.drafted.append(n_draft)
            out = self._advance(r, toks)
            gen += out.tokens
            if not r.prefilled:
                r.prefilled = True
                prompt += len(r.prompt)
                cached += r.cached_tokens
                r.first_token_at = now
                m.ttft.observe(now - r.arrival)
            else:
                itls.append(now - r.last_emit_at)
            r.last_emit_at = now
            if r.stall_at_token > 0 and r.generated >= r.stall_at_token and out.finish is None:
                r.paused_until = now + r.stall_s
                r.stall_at_token = -1
            if out.finish is not None:
                r.finished = True
                self._finish_metrics(r, out.finish, now)
            if not r.deliver(r, out):
                r.finished = True
        m.step(gen, prompt, cached, itls, drafts, draft_tokens, accepted_total, per_pos,
               running=sum(1 for r in self.running if not r.finished), waiting=len(self.waiting),
               kv_usage=self._kv_usage())

    def _advance(self, r: Request, toks: list[int]) -> StepOutput:
        text = []
        count = 0
        for t in toks:
            if t == EOS:
                return StepOutput(count, "".join(text), "stop")
            piece = self.tok.decode_one(t)
            r.generated += 1
            count += 1
            if r.index is not None:
                r.index.append(t)
            if r.stop:
                r.text_tail = (r.text_tail + piece)[-256:]
                hit = next((s for s in r.stop if s in r.text_tail), None)
                if hit is not None:
                    cut = len(r.text_tail) - r.text_tail.index(hit)
                    text.append(piece)
                    joined = "".join(text)
                    return StepOutput(count, joined[: max(0, len(joined) - cut)], "stop", hit)
            text.append(piece)
            if r.generated >= r.max_tokens:
                return StepOutput(count, "".join(text), "length")
        return StepOutput(count, "".join(text))

    def _finish_metrics(self, r: Request, reason: str, now: float) -> None:
        e2e = now - r.arrival
        decode = now - r.first_token_at
        self.metrics.finish(reason, e2e, decode / (r.generated - 1) if r.generated > 1 else 0.0,
                            now - r.scheduled_at)

    def _kv_usage(self) -> float:
        cap = self.cfg.gpu.kv_capacity_tokens(self.cfg.model)
        used = sum(len(r.prompt) + r.generated for r in self.running if not r.finished)
        return min(1.0, used / cap) if cap > 0 else 0.0
