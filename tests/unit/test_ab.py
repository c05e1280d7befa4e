"""spec-ab's pure parts: the arm schedule, the Locust command, bad options, a bad run's levels."""

from __future__ import annotations

import io
import json
import signal
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from locust.util.load_locustfile import load_locustfile
from locust_spec.analysis.model import ArmMetrics, LevelVerdict, Verdict

from locust_spec.ab import capacity, children, progress, sessions
from locust_spec.ab import cli as ab
from locust_spec.client.http_fetch import METRICS_URLS_ENV
from locust_spec.core.design import CLOCK_DIR_ENV, INTERLEAVED, READY_FILE, READY_MARGIN_S, SEQUENTIAL
from locust_spec.wiring.shape import ConcurrencyLadder

OUT = Path("runs/x")
LADDER = ab.Ladder("1,64", "20s", "2s")
LOAD = ab.Load(prompts=("quote", "code:3"), max_tokens=None, ignore_eos=False, seed=7, model="", processes=1)


def test_arms_alternate_abba_between_repeats():
    runs = ab.schedule(3, OUT)
    assert [(r.arm, r.repeat) for r in runs] == [("baseline", 0), ("candidate", 0), ("candidate", 1),
                                                 ("baseline", 1), ("baseline", 2), ("candidate", 2)]
    assert runs[2].prefix == OUT / "candidate" / "r1"


def test_the_host_is_the_servers_root_url():
    assert ab.base_url("http://h:8000/v1/") == "http://h:8000"
    assert ab.base_url("http://h:8000/") == "http://h:8000"
    assert ab.base_url("https://h/api/v1") == "https://h/api"


def _value(cmd: list[str], flag: str) -> str:
    return cmd[cmd.index(flag) + 1]


def test_both_arms_get_the_same_load_and_differ_only_in_host_and_files():
    base, cand = ab.schedule(1, OUT)
    a = ab.locust_command(base, "http://a:1", LADDER, LOAD)
    b = ab.locust_command(cand, "http://b:2", LADDER, LOAD)
    differing = {i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y}
    assert {a[i - 1] for i in differing} == {"--host", "--csv"}
    assert _value(a, "--csv") == str(OUT / "baseline" / "r0")
    assert [a[i + 1] for i, arg in enumerate(a) if arg == "--prompts"] == ["quote", "code:3"]
    assert (_value(a, "--levels"), _value(a, "--stage-time"), _value(a, "--warmup")) == ("1,64", "20s", "2s")
    assert _value(a, "--seed") == "7" and "--headless" in a
    assert _value(a, "-f") == str(ab.SWEEP_LOCUSTFILE)


def test_an_open_loop_arm_is_given_its_rates_and_no_ladder_of_users():
    """The recorded command is the command that ran: an open-loop run climbs --rates, never --levels."""
    run = ab.schedule(1, OUT)[0]
    rated = ab.locust_command(run, "http://a:1", ab.Ladder("1,64", "20s", "2s", "0.5,2"), LOAD)
    assert _value(rated, "--rates") == "0.5,2" and "--levels" not in rated
    assert _value(rated, "--stage-time") == "20s"


def test_optional_load_settings_reach_locust_only_when_given():
    run = ab.schedule(1, OUT)[0]
    plain = ab.locust_command(run, "http://a:1", LADDER, LOAD)
    assert not {"--ignore-eos", "--processes", "--max-tokens", "--model", "--metrics-url"} & set(plain)
    load = ab.Load(("all",), 64, True, 1, "m", 4)
    full = ab.locust_command(run, "http://a:1", LADDER, load)
    assert "--ignore-eos" in full
    assert [_value(full, flag) for flag in ("--processes", "--max-tokens", "--model")] == ["4", "64", "m"]
    assert _value(full, "--master-bind-host") == "127.0.0.1"


def test_each_runs_master_listens_on_a_free_port_of_its_own_and_its_workers_connect_there():
    # Two runs at once (a session's arms, or another spec-ab) on Locust's default 5557 exchanged workers.
    load = ab.Load(("all",), None, False, 1, "", 2)
    base, cand = (ab.locust_command(run, "http://a:1", LADDER, load) for run in ab.schedule(1, OUT))
    ports = []
    for cmd in (base, cand):
        port = _value(cmd, "--master-bind-port")
        assert _value(cmd, "--master-port") == port and port != "5557"
        assert _value(cmd, "--master-host") == _value(cmd, "--master-bind-host") == "127.0.0.1"
        ports.append(port)
    assert ports[0] != ports[1]


def test_an_arms_metrics_url_travels_in_the_childs_environment_never_its_command_line(monkeypatch):
    monkeypatch.setenv(METRICS_URLS_ENV, "http://left-over/metrics")
    url = "http://scraper:pw-7d1e@a:9/metrics?token=q-55"
    assert ab.child_env(url)[METRICS_URLS_ENV] == url
    assert METRICS_URLS_ENV not in ab.child_env(None)  # an arm without one scrapes HOST/metrics


def test_an_unusable_metrics_url_is_a_usage_error_without_its_secret(tmp_path):
    result = CliRunner().invoke(ab.main, ["--baseline", "http://a:1", "--candidate", "http://b:2",
                                          "--metrics-url-candidate", "http://u:Pa/Ss9@b:2/metrics",
                                          "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert "--metrics-url-candidate #1 of 1: the address has an invalid port" in result.output
    assert "Ss9" not in result.output and "Traceback" not in result.output


def test_counters_are_scraped_several_times_in_every_measured_window():
    for stage, warmup in [("10s", "2s"), ("25s", "3s"), ("60s", "5s"), ("2m", "0")]:
        ladder = ab.Ladder("1", stage, warmup)
        measured = ab.parse_stage_time(stage) - ab.parse_duration(warmup)
        assert 0.5 <= ladder.metrics_interval_s <= 1.0
        assert measured / ladder.metrics_interval_s >= 6 or ladder.metrics_interval_s == 1.0


def test_the_sweep_locustfile_runs_the_chat_user_under_the_ladder():
    users, shapes = load_locustfile(str(ab.SWEEP_LOCUSTFILE))
    assert list(users) == ["ChatUser"]
    assert [type(s) for s in shapes] == [ConcurrencyLadder]


def test_one_url_without_the_other_is_refused_in_one_line(tmp_path):
    result = CliRunner().invoke(ab.main, ["--baseline", "http://a:1", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "give both --baseline and --candidate" in result.output
    assert not list(tmp_path.iterdir())


def test_bad_ladder_options_are_refused_before_anything_starts(tmp_path):
    for args in (["--levels", "1,x"], ["--stage-time", "0s"], ["--warmup", "soon"], ["--processes", "0"],
                 ["--processes", "many"],
                 ["--speculative-config", "{nope"]):
        result = CliRunner().invoke(ab.main, [*args, "--out", str(tmp_path / "run")])
        assert result.exit_code == 2, (args, result.output)
        assert "Error: Invalid value" in result.output
        assert not (tmp_path / "run").exists()


def test_a_locust_killed_mid_level_is_said_so_and_its_log_is_kept(tmp_path):
    # A child that prints a stats line (the last words of a killed Locust's log) and is then killed.
    script = "import os, signal; print(' Name | # reqs', flush=True); os.kill(os.getpid(), signal.SIGKILL)"
    runs = ab.schedule(1, tmp_path, ("baseline",))
    (session,) = sessions.sessions(runs, ab.Ladder("1", "2s", "0s").design(SEQUENTIAL, 1, "1s"))
    display = progress.Display(io.StringIO(), tty=False)
    with pytest.raises(sessions.SessionError) as failed:
        sessions.run(session, lambda run, design: ([sys.executable, "-c", script], {}), display)
    log = tmp_path / "baseline" / "r0.log"
    assert str(failed.value) == (f"locust (baseline r0) killed by SIGKILL mid-run (not by spec-ab: the "
                                 f"kernel's out-of-memory killer, or someone on this machine) (log: {log})")
    assert "Name | # reqs" in log.read_text(), "the log it names is kept"
    assert not (tmp_path / "baseline" / "r0_design.json").exists(), "the unfinished run's data is not"


# A stand-in for one arm's Locust under a blocked design: it says it is up (the shared clock's meeting
# folder), writes a row file, and runs until stopped; as Locust, it writes its summary on SIGINT only.
_ARM = ("import os, sys, time, pathlib; prefix, slot = sys.argv[1], sys.argv[2]; "
        "pathlib.Path(prefix + '_requests.csv').write_text('rows'); "
        "pathlib.Path(os.environ['" + CLOCK_DIR_ENV + "'], '" + READY_FILE + "'.format(slot=slot)).touch()\n"
        "try:\n    time.sleep(60)\n"
        "except KeyboardInterrupt:\n    pathlib.Path(prefix + '_summary.json').write_text('{}')")


def _interrupted_after(tmp_path: Path, seconds: float) -> sessions.Interrupted | KeyboardInterrupt:
    runs = ab.schedule(1, tmp_path)
    (session,) = sessions.sessions(runs, ab.Ladder("1,2,4", "1s", "0s").design(INTERLEAVED, 2, "0.5s"))

    def interrupt(_signum, _frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)  # a real Ctrl-C's KeyboardInterrupt, on a timer
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        sessions.run(session, lambda run, design: (
            [sys.executable, "-c", _ARM, str(run.prefix), str(design.slot)], {}),
            progress.Display(io.StringIO(), tty=False))
    except KeyboardInterrupt as exc:
        return exc
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    raise AssertionError("the session was not interrupted")


def test_an_interrupt_keeps_the_levels_a_blocked_session_finished(tmp_path):
    # levels of 2 s on the clock (two arms x 1 s); the clock starts 1 s after both are up (within 1 s)
    exc = _interrupted_after(tmp_path, READY_MARGIN_S + 3)
    assert isinstance(exc, sessions.Interrupted) and exc.levels == 1
    assert exc.line() == "the 1 level(s) of baseline+candidate r0 that had ended (1)"
    for arm in ("baseline", "candidate"):
        assert (tmp_path / arm / "r0_requests.csv").read_text() == "rows"
        assert (tmp_path / arm / "r0_design.json").is_file()
        assert (tmp_path / arm / "r0_summary.json").is_file(), "stopped so that it writes its files"
    line = sessions.interrupted_line("spec-ab", tmp_path, [], exc, "Locust")
    assert line == (f"spec-ab: interrupted; Locust stopped, kept the 1 level(s) of baseline+candidate r0 "
                    f"that had ended (1) in {tmp_path} (spec-verdict {tmp_path} judges what was measured); "
                    "the same command with --resume measures the rest, the interrupted session again whole")


def test_an_interrupt_before_a_level_ended_discards_the_session_but_its_logs(tmp_path):
    exc = _interrupted_after(tmp_path, 0.5)
    assert not isinstance(exc, sessions.Interrupted)
    assert sorted(p.name for p in (tmp_path / "baseline").iterdir()) == ["r0.log"]


def test_a_failed_process_is_explained_by_its_first_error_line():
    log = ("[2026-01-01 00:00:00,000] vm/INFO/locust.main: Starting Locust\n"
           "[2026-01-01 00:00:01,000] vm/ERROR/locust_spec.plugin: locust-spec: cannot read the "
           "model; pass --model\n"
           " Name | # reqs\n--------|------\n")
    assert children.log_reason(log) == "locust-spec: cannot read the model; pass --model"
    assert children.log_reason("spec-sim: bad --speculative-config\n") == "spec-sim: bad --speculative-config"
    assert children.log_reason("a\nlast words\n") == "last words"
    assert children.log_reason("") == "no output"


def _level(users: int, base: tuple[int, int], cand: tuple[int, int]) -> LevelVerdict:
    def arm(requests: int, failures: int) -> ArmMetrics:
        return ArmMetrics(requests, failures, *[None] * 7)

    return LevelVerdict(users=users, verdict="inconclusive", acceptance=None, mean_acceptance_length=None,
                        per_position=(), baseline=arm(*base), candidate=arm(*cand), changes={},
                        reasons=(), diagnoses=())


def test_a_level_where_an_arm_failed_most_requests_makes_the_run_bad():
    verdict = Verdict(verdict="inconclusive", summary="", levels=(
        _level(1, (20, 0), (20, 10)), _level(4, (40, 21), (40, 0)), _level(16, (0, 0), (30, 30))),
        diagnoses=(), warnings=())
    assert ab.failed_levels(verdict) == ["baseline failed 21 of 40 requests at 4 users",
                                         "candidate failed 30 of 30 requests at 16 users"]


def test_processes_auto_plans_one_process_where_there_is_no_choice_and_says_why(tmp_path, monkeypatch):
    monkeypatch.setattr(capacity, "cores", lambda: [0, 1])  # whatever cores the test runner was given
    said = []
    count, reason = ab.auto_processes("1,512", True, tmp_path, said.append)
    assert count == 1 and "pinned to one core beside the simulators" in reason
    count, reason = ab.auto_processes("1,4,16,48", False, tmp_path, said.append)
    assert count == 1 and "48 streams stay under half a core" in reason
    # Open loop: the streams are the requests in flight at most, whatever the levels say.
    count, reason = ab.auto_processes("1,4096", False, tmp_path, said.append, streams=48)
    assert count == 1 and "48 streams stay under half a core" in reason
    assert not said and not list(tmp_path.iterdir())  # nothing measured: nothing to choose


def test_processes_auto_leaves_a_core_to_servers_on_this_machine(tmp_path, monkeypatch):
    cores = 4
    monkeypatch.setattr(capacity, "cores", lambda: list(range(cores)))  # not the test runner's
    # A previous run in the folder measured 40 us a chunk at 64 streams: 256 streams (25,600 chunks/s)
    # want 3 processes (86 streams each: 34% of a core; 128 each: 51%).
    previous = tmp_path / "baseline" / "r0_summary.json"
    previous.parent.mkdir()
    previous.write_text(json.dumps({"client": {"generators": {"by_process": {"local": {"budget_by_level": {
        "64": {"chunks": 200_000, "cpu_us_per_chunk": 40.0}}}}}}}))
    said = []
    count, reason = ab.auto_processes("16,256", False, tmp_path, said.append, local=True)
    assert not said and count == min(3, cores - 1)
    assert f"1 of the {cores} cores this client may use left to them" in reason
    remote, why = ab.auto_processes("16,256", False, tmp_path, said.append)
    assert remote == min(3, cores) and "40.0 us" in why and "left to them" not in why


def test_an_arms_gpu_power_exporter_is_scraped_beside_its_server_and_recorded_only_when_given():
    assert ab.scraped_urls(None, None, "http://a:8000") is None  # the child's default: HOST/metrics
    assert ab.scraped_urls(None, "http://a:9400/metrics", "http://a:8000") == \
        "http://a:8000/metrics http://a:9400/metrics"
    assert ab.scraped_urls("http://m/metrics", "http://a:9400/metrics", "http://a:8000") == \
        "http://m/metrics http://a:9400/metrics"
    metrics = {"baseline": None, "candidate": None}
    before = ab.servers_record({"baseline": "b", "candidate": "c"}, metrics, False)
    assert "power_metrics_urls" not in before  # a folder measured before the option still resumes
    assert before == ab.servers_record({"baseline": "b", "candidate": "c"}, metrics, False,
                                       {"baseline": None, "candidate": None})
    given = ab.servers_record({"baseline": "b", "candidate": "c"}, metrics, False,
                              {"baseline": "http://u:p@a:9400/metrics?t=1", "candidate": None})
    assert given["power_metrics_urls"] == {"baseline": "http://a:9400/metrics", "candidate": None}


def test_the_start_line_says_a_levels_length_and_why_it_is_twice_the_stage_time():
    from locust_spec.core.design import Design

    interleaved = Design.planned("interleaved", [1, 64], 60.0, 1.0, 2, target_block_s=5.0)
    assert ab.level_length_text(interleaved) == "60s each: --stage-time 30s per arm, in turns"
    simultaneous = Design.planned("simultaneous", [1, 64], 30.0, 1.0, 2, target_block_s=5.0)
    assert ab.level_length_text(simultaneous) == "30s each"
    assert ab.level_length_text(Design.planned("sequential", [1], 30.0, 1.0, 2)) == "30s each"
