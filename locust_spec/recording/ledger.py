"""The arrival ledger: on the master (or the single process), every rate level's plan against the rows that
came back, so a level whose schedule was not kept is flagged with the rate it really achieved, never
reported as if the rate had been met.

Per level it counts, for the arrivals due in its measured window (after warm-up, before its end or the
stop), those a row shows started, per slot (so a worker that died is named with the arrivals it missed);
those sent before the window ended (per second of it, the achieved rate: a client that falls behind
sends part of a window's arrivals after it, a backlog from the warm-up does not count); and, as exact
histograms, how late each went out and TTFT and E2E from the intended start. A rate that comes back in a
later level (spec-tune's swings) adds to its key's account. Memory: a few histograms and one counter per
slot per level.

Under spec-ab's interleaved design an arm's plan holds arrivals only in its own blocks (the plan's
windows, core/arrivals.py): an arrival in the other arm's block is not this arm's, so it is never due here
(neither missed nor late), the window's seconds are the arm's own blocks' after warm-up, and an arrival
counts as sent in the window when it went out before its block ended.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
from hdrh.histogram import HdrHistogram

from locust_spec.core.arrivals import SlotCounter
from locust_spec.core.level import Level, LevelKey
from locust_spec.core.runfiles import RequestRow
from locust_spec.recording.histograms import new_histogram, percentiles_us, record_ms

MAX_LATENESS_P99_MS = 50.0
"""A level whose arrivals went out later than this at the 99th percentile did not keep its schedule: at 40
req/s that is two gaps. Under capacity a load generator's lateness is its event-loop jitter (a few ms)."""
MAX_MISSED_SHARE = 0.01
"""A level that never sent more than this share of its arrivals did not keep its rate."""
MAX_LEVELS = 64


@dataclass(eq=False)
class LevelAccount:
    level: Level
    end_unix_s: float
    started: np.ndarray
    due: SlotCounter
    sent_in_window: int = 0
    rows: int = 0
    lateness: HdrHistogram = field(default_factory=new_histogram)
    ttft_from_arrival: HdrHistogram = field(default_factory=new_histogram)
    e2e_from_arrival: HdrHistogram = field(default_factory=new_histogram)

    def add(self, row: RequestRow, cutoff_unix_s: float) -> None:
        if row.arrival is None or row.intended_unix_s is None:
            return  # a task's later requests: they started for no arrival of their own
        self.rows += 1
        start, end = self.level.warmup_until_unix_s, min(self.end_unix_s, cutoff_unix_s)
        if not start <= row.intended_unix_s < end:
            return
        self.started[row.arrival % len(self.started)] += 1
        if row.start_unix_s < min(end, self.level.plan.window_end(row.intended_unix_s)):
            self.sent_in_window += 1
        if row.start_unix_s >= cutoff_unix_s:
            return  # sent while the test was stopping: how late is the stop's doing, not the schedule's
        late = max(row.lateness_ms or 0.0, 0.0)
        record_ms(self.lateness, (late,))
        if not row.error:
            for hist, value in ((self.ttft_from_arrival, row.ttft_ms), (self.e2e_from_arrival, row.e2e_ms)):
                if value is not None:
                    record_ms(hist, (value + late,))


def _quantiles(hist: HdrHistogram) -> dict | None:
    if not hist.total_count:
        return None
    p50, p99 = percentiles_us(hist, (50.0, 99.0))
    return {"p50": p50 / 1000.0, "p99": p99 / 1000.0, "max": hist.get_max_value() / 1000.0}


class ArrivalLedger:
    """Every rate level of the test so far: `planned` as the master publishes it, `add` per row, `stopped`
    when the test stops (arrivals due after that were never owed)."""

    def __init__(self) -> None:
        self._levels: list[LevelAccount] = []
        self.cutoff_unix_s = math.inf

    def reset(self) -> None:
        self._levels.clear()
        self.cutoff_unix_s = math.inf

    def planned(self, level: Level) -> None:
        plan = level.plan
        if plan is None:
            return
        if plan.start_unix_s >= self.cutoff_unix_s:
            self.reset()  # a plan after the stop: a new test (the web UI's), whose account this becomes
        if len(self._levels) >= MAX_LEVELS:
            return
        for account in self._levels:  # the previous level ends where this one starts
            account.end_unix_s = min(account.end_unix_s, plan.start_unix_s)
        started = np.zeros(len(plan.slots), dtype=np.int64)
        self._levels.append(LevelAccount(level, plan.end_unix_s, started,
                                         SlotCounter(plan, level.warmup_until_unix_s)))

    def stopped(self, at_unix_s: float) -> None:
        self.cutoff_unix_s = min(self.cutoff_unix_s, at_unix_s)

    def add(self, row: RequestRow) -> None:
        if row.level_rate is None or row.intended_unix_s is None:
            return
        key = row.level_key
        for account in reversed(self._levels):  # the level it was planned in: the last started before it
            if account.level.key == key and account.level.plan.start_unix_s <= row.intended_unix_s:
                account.add(row, self.cutoff_unix_s)
                return

    def summary(self, now_unix_s: float | None = None,
                workers: Iterable[str] = ()) -> tuple[dict[str, dict], list[str]]:
        """Per rate level (key `4/s`) what the contract's `arrivals` holds, and a warning per level whose
        schedule was not kept; `workers` (a master's, every one that reported) that hold no slot of a level
        joined after it was planned: they are listed, having taken none of its arrivals."""
        now = time.time() if now_unix_s is None else now_unix_s
        by_key: dict[LevelKey, list[LevelAccount]] = {}
        for account in self._levels:
            by_key.setdefault(account.level.key, []).append(account)
        out: dict[str, dict] = {}
        warnings: list[str] = []
        for key, accounts in by_key.items():
            entry = level_summary(accounts, [min(a.end_unix_s, self.cutoff_unix_s, now) for a in accounts])
            entry["joined_late"] = sorted(set(workers) - set(entry["slots"]))
            out[str(key)] = entry
            if entry["flagged"]:
                warnings.append(f"rate {key}: the schedule was not kept ({'; '.join(entry['why'])}); "
                                f"achieved {entry['achieved_rate']:.2f} req/s of {entry['rate']:g} with at "
                                f"most {entry['users']} requests in flight (--max-concurrency, or -u "
                                "without the ladder): this level measured a lower rate than asked, and "
                                "spec-verdict leaves it inconclusive")
        return out, warnings


def _merged(hists: list[HdrHistogram]) -> HdrHistogram:
    if len(hists) == 1:
        return hists[0]
    out = new_histogram()
    for hist in hists:
        out.add(hist)
    return out


def level_summary(accounts: list[LevelAccount], ends_unix_s: list[float]) -> dict:
    """One rate's entry over the levels that ran it (usually one), each up to its end."""
    first = accounts[0].level
    plan = first.plan
    window_s = total = sent = 0.0
    due: dict[str, int] = {}
    got: dict[str, int] = {}
    for account, end in zip(accounts, ends_unix_s, strict=True):
        start = account.level.warmup_until_unix_s
        span = account.level.plan.open_s(start, end)
        window_s += span
        slots = account.level.plan.slots
        scheduled = account.due.until(end) if span > 0 else [0] * len(slots)
        for slot, n, m in zip(slots, scheduled, account.started.tolist(), strict=True):
            due[slot] = due.get(slot, 0) + n
            got[slot] = got.get(slot, 0) + m
        total += sum(scheduled)
        sent += account.sent_in_window
    missed = {slot: due[slot] - got[slot] for slot in due if due[slot] > got[slot]}
    extra = sum(max(got[slot] - due[slot], 0) for slot in due)
    lateness = _quantiles(_merged([a.lateness for a in accounts]))
    why = []
    if lateness is not None and lateness["p99"] > MAX_LATENESS_P99_MS:
        why.append(f"lateness p99 {lateness['p99']:.0f} ms, above {MAX_LATENESS_P99_MS:g} ms")
    missed_total = sum(missed.values())
    if total and missed_total > MAX_MISSED_SHARE * total:
        who = ", ".join(f"{n} on {slot}" for slot, n in missed.items())
        why.append(f"{missed_total} of {int(total)} arrivals never sent ({who})")
    if extra:
        why.append(f"{extra} rows for arrivals no slot was owed (a process started one twice?)")
    return {
        "rate": plan.rate, "arrival": plan.arrival, "burstiness": plan.burstiness, "seed": plan.seed,
        "users": first.users, "slots": list(due), "window_s": round(window_s, 3),
        "scheduled": int(total), "started": int(sum(got.values())), "missed": missed_total,
        "missed_by_slot": missed, "rows": sum(a.rows for a in accounts),
        "scheduled_rate": round(total / window_s, 4) if window_s else None,
        "achieved_rate": round(sent / window_s, 4) if window_s else 0.0,
        "lateness_ms": lateness,
        "ttft_from_arrival_ms": _quantiles(_merged([a.ttft_from_arrival for a in accounts])),
        "e2e_from_arrival_ms": _quantiles(_merged([a.e2e_from_arrival for a in accounts])),
        "flagged": bool(why), "why": why,
    }
