"""spec-sim's --fixed-step-ms: a known wall-clock step, whatever the batch, for client-fidelity checks."""

from __future__ import annotations

import json
import urllib.request

from tests.e2e.test_sim_api import NGRAM, QUOTE, stream


def test_every_step_lasts_the_fixed_wall_time_whatever_the_time_scale(spec_sim, tmp_path):
    log = tmp_path / "send.csv"
    sim = spec_sim("--time-scale", "0.001", "--fixed-step-ms", "40", "--speculative-config", NGRAM,
                   "--send-log", str(log))
    chunks = [e for e in stream(sim.url, QUOTE, max_tokens=20) if e != "[DONE]" and e["choices"]]
    schedule = json.loads(urllib.request.urlopen(sim.url + "/admin/stats").read())["schedule"]
    sim.stop()
    steps = len(chunks) - 1  # the role chunk goes out with the first token's step
    assert schedule["steps"] == steps and abs(schedule["mean_step_ms"] - 40.0) < 1e-9
    _, *rows = [r.split(",") for r in log.read_text().splitlines()]
    arrival = next(int(r[1]) for r in rows if r[2] == "-1")
    # Steps run back to back from the arrival, each at least 40 ms: lateness only adds.
    assert int(rows[-1][1]) - arrival >= steps * 40e6 * 0.99
