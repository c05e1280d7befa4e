"""Trace replay end to end: `--trace` sends a trace's rows at its times (scaled by --trace-speedup), each
prompt its row's, max_tokens its output length, and the ledger accounts for every row."""

from __future__ import annotations

import json
from pathlib import Path

from tests.e2e.chat_runs import chat

MOONCAKE = str(Path(__file__).resolve().parents[1] / "data" / "traces" / "mooncake.jsonl")


def test_a_trace_is_sent_at_its_times_with_its_lengths(tmp_path, spec_sim):
    sim = spec_sim("--time-scale", "0.05")
    # the helper's --max-tokens 32 would cap the trace's lengths (as it caps any prompt's): raised past them
    run = chat(tmp_path, sim.url, "--trace", MOONCAKE, "--trace-speedup", "2", "--max-tokens", "100",
               users=4, seconds=5)
    rows = sorted(run.rows(), key=lambda r: int(r["arrival"]))
    assert [r["prompt_id"] for r in rows] == ["trace-0", "trace-1", "trace-2", "trace-3"]
    assert [int(r["output_tokens"]) for r in rows] == [20, 35, 12, 64]  # max_tokens from the trace
    intended = [float(r["intended_unix_s"]) for r in rows]
    assert [round(t - intended[0], 3) for t in intended] == [0.0, 0.125, 0.5, 1.5]  # twice as fast
    assert all(r["level_rate"] == "2.667" and not r["error"] for r in rows)
    level = json.loads(Path(f"{run.prefix}_summary.json").read_text())["arrivals"]["2.667/s"]
    assert (level["arrival"], level["scheduled"], level["started"], level["missed"]) == ("trace", 4, 4, 0)
