"""spec-tune end to end on spec-sim: one server per k, the schedule, served and confirmed."""

from __future__ import annotations

import json
import subprocess

import pandas as pd
import pytest

from locust_spec.core import schedule
from tests.e2e.test_spec_ab import _fast
from tests.support import BIN, REPO
from tests.unit.test_tune_schedule import vllm_utils

pytestmark = pytest.mark.timeout(1200)


def test_spec_tune_switches_speculation_off_at_64_users_and_confirms_the_schedule(tmp_path):
    out = tmp_path / "run"
    # interleaved: 20 s a level for the two k (30 s for the confirmation's three arms) in 2.5 s blocks
    cmd = [str(BIN / "spec-tune"), "--out", str(out), "--levels", "1,64", "--k", "0,4", "--stage-time", "10s",
           "--warmup", "2s", "--block-time", "2.5s", "--swing-stage-time", "3s", *_fast(tmp_path)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1100, cwd=REPO)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    written = json.loads((out / "schedule.json").read_text())
    entries = written[schedule.KEY]
    schedule.validate(entries)
    real = vllm_utils()
    if real is not None:
        assert real.validate_and_normalize_dynamic_sd_schedule(entries)
    by_users = {level["users"]: level for level in written["levels"]}
    assert by_users[1]["k"] == 4, by_users[1]["reason"]
    assert by_users[64]["k"] == 0, by_users[64]["reason"]
    assert by_users[1]["batch"] < 2 and 32 < by_users[64]["batch"] <= 64, "batch measured, not users"
    assert entries[0][:1] == [1] and entries[-1][2] == 0 and written["thresholds_batch"]
    assert json.loads(written["speculative_config_arg"].split(" ", 1)[1].strip("'")) == \
        written["speculative_config"]

    result = json.loads((out / "tune.json").read_text())
    arms = {a["k"]: a for a in result["decisions"][0]["arms"]}
    assert arms[0]["units"] == 4 and arms[0]["mde_pct"] is not None  # block groups, paired with k=4
    assert json.loads((out / "tune" / "k4" / "r0_design.json").read_text())["slot"] == 1
    conf = result["confirmation"]
    assert [c["users"] for c in conf["levels"]] == [1, 64]
    assert all(c["measured"]["schedule"] for c in conf["levels"])
    assert len(conf["swings"]) == 1 and conf["swings"][0]["users"] == [1, 64]
    assert isinstance(conf["swings"][0]["collapse"], bool)
    assert conf["summary"] in done.stdout
    for name in ("report.md", "report.html", "schedule.png"):
        assert (out / name).stat().st_size > 0, name
    assert "Swing across each threshold" in (out / "report.md").read_text()

    # The served schedule: drafts at one user, (nearly) none at 64, as its per-request stats show.
    rows = pd.read_csv(out / "confirm" / "schedule" / "r0_requests.csv")
    rows = rows[rows["warmup"] != 1]
    rate = {u: rows.loc[rows["level_users"] == u, "spec_draft_tokens"].sum()
            / rows.loc[rows["level_users"] == u, "output_tokens"].sum() for u in (1, 64)}
    assert rate[1] > 0.3 and rate[64] < 0.1 * rate[1], rate
    assert '"num_speculative_tokens_per_batch_size"' in (out / "servers" / "schedule.json").read_text()
