"""spec-sim's modelled GPU power, exposed as a DCGM exporter would (`/metrics/dcgm`), so that energy per
token can be tried without a GPU (docs/cost.md). Modelled, not measured: the GPU draws its busy watts while
the engine steps (the roofline's step times) and its idle watts between steps."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from locust_spec.sim.roofline import Gpu

IDLE_SHARE = 0.15
"""Idle draw as a share of the board's power: an assumption (datasheets do not state idle power; a
data-centre GPU with a model loaded and no work sits near a tenth to a fifth of it). --gpu-power sets both."""
MIN_GAUGE_S = 0.1
"""The gauge is the mean power since the previous scrape when that is at least this long ago."""


@dataclass(frozen=True)
class PowerModel:
    idle_w: float
    busy_w: float

    def joules(self, elapsed_s: float, busy_s: float) -> float:
        """Energy over `elapsed_s` seconds of which `busy_s` were spent stepping."""
        return self.idle_w * elapsed_s + (self.busy_w - self.idle_w) * min(max(busy_s, 0.0), elapsed_s)


def power_model(gpu: Gpu, text: str | None = None, time_scale: float = 1.0) -> PowerModel:
    """The GPU's board power busy and IDLE_SHARE of it idle, or `IDLE,BUSY` watts; ValueError if bad.
    Divided by the time scale: a step that lasts `time_scale` times longer on the wall clock is the same
    work, so joules per token stay the modelled GPU's."""
    if text:
        try:
            idle, busy = (float(x) for x in text.split(","))
        except ValueError:
            raise ValueError(f"--gpu-power: {text[:40]!r} is not IDLE,BUSY watts (e.g. 60,400)") from None
        if not 0 <= idle <= busy or busy == float("inf"):
            raise ValueError("--gpu-power: IDLE,BUSY with 0 <= IDLE <= BUSY watts")
    else:
        idle, busy = gpu.board_w * IDLE_SHARE, gpu.board_w
    return PowerModel(idle / time_scale, busy / time_scale)


class GpuPower:
    """One simulated GPU's energy counter (millijoules since the simulator started) and power gauge."""

    def __init__(self, model: PowerModel, gpu_name: str, clock: Callable[[], float] = time.perf_counter):
        self.model = model
        self.gpu_name = gpu_name
        self._clock = clock
        self._start = clock()
        self._last = (self._start, 0.0)
        self._watts = model.idle_w

    def exposition(self, busy_s: Callable[[float], float]) -> bytes:
        """The DCGM exporter's two series (Prometheus text); `busy_s(now)`: the seconds stepped by then."""
        now = self._clock()
        joules = self.model.joules(now - self._start, busy_s(now))
        then, before = self._last
        if now - then >= MIN_GAUGE_S:
            self._watts = (joules - before) / (now - then)
            self._last = (now, joules)
        labels = (f'gpu="0",UUID="GPU-spec-sim-0",device="nvidia0",modelName="{self.gpu_name} (spec-sim, '
                  'modelled)",Hostname="spec-sim"')
        return (
            "# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).\n"
            "# TYPE DCGM_FI_DEV_POWER_USAGE gauge\n"
            f"DCGM_FI_DEV_POWER_USAGE{{{labels}}} {self._watts:.3f}\n"
            "# HELP DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION Total energy consumption since boot (in mJ).\n"
            "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n"
            f"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{labels}}} {int(joules * 1000)}\n"
        ).encode()
