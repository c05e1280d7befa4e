"""What spec-ab (and spec-tune) may do with a run folder that already holds results (pure decisions; the
command reads the files and acts).

A user's results are never deleted or overwritten unless told: a folder that holds any is refused with one
line, unless `--overwrite` (cleared, but only once the preflight has passed) or `--resume` (spec-ab: keep
what finished with the same settings, measure the rest, then judge everything).

The unit `--resume` keeps is a *session* (ab/sessions.py): under the interleaved and simultaneous designs
every arm of one repeat, whose blocks alternate on one clock, so neither arm's sweep is finished without
the other's; sequential, one arm's sweep of one repeat. A level is not a unit: its blocks are paired with
the other arm's blocks of the same clock, and a level measured later would be paired with nothing. A
session is kept when every run of it finished its ladder (PREFIX_run.json ended at or after the ladder's
end) and was measured as this command would measure it now: the same Locust options (PREFIX_run.json's
`command`, leaving out what differs between any two runs: host, ports, file paths, the clock) and the same
design (PREFIX_design.json, but for its clock). The servers (URLs, or the simulators' settings) are in the
folder's `spec-ab.json`; a folder without it, or measured on other servers, is not resumed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from locust_spec.ab import outdir
from locust_spec.ab.resume_check import Now, difference
from locust_spec.core.design import Design

SETTINGS_FILE = "spec-ab.json"
SETTINGS_SCHEMA = "locust-spec/ab-run/1"
LOGS = frozenset({"sim-baseline.log", "sim-candidate.log"})
CALIBRATION = "calibration"
"""--processes auto's measurement of this machine (ab/capacity.py): the client's, not a result."""
"""spec-ab's own server logs: not results (a run whose preflight failed leaves them)."""
STAGING = ".spec-ab-starting"
"""Where the simulators log while the preflight runs under --overwrite: the folder's files stay untouched
until it passes."""
VOLATILE = frozenset({"-f", "--host", "--csv", "--blocks", "--master-bind-host", "--master-bind-port",
                      "--master-host", "--master-port"})
"""Locust options whose values differ between any two runs of the same settings (a server's free port, the
run's file prefix, the shared clock: the design is compared on its own)."""
_OPTION = re.compile(r"--?[A-Za-z]")
END_SLACK_S = 0.5
"""A run whose record ended this much before its ladder's end was stopped early (a hard kill of spec-ab)."""


def results(entries: Sequence[str], mine: Collection[str] = ()) -> list[str]:
    """The folder's entries that may be a user's results: all but the record of what the tool wrote and its
    lock (ab/outdir.py), and, where that record lists them (`mine`: its top-level names), spec-ab's own
    logs, its record of the servers and its calibration (alone, they are what a run whose preflight failed,
    or that stopped in its first session, leaves; a user's file of one of those names is a result)."""
    own = (LOGS | {STAGING, SETTINGS_FILE, CALIBRATION}) & set(mine)
    return sorted(e for e in entries if e not in own and e not in outdir.OWN)


def refusal(command: str, out: Path, found: Sequence[str], options: Sequence[str]) -> str | None:
    """The one line that refuses a folder holding results (`found`, from `results`; None: go ahead).
    `options` are the ways on that the command offers (--overwrite, --resume), as `--x: what it does`
    texts."""
    if not found:
        return None
    shown = ", ".join(found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
    return f"{command}: {out} already holds results ({shown}), left untouched; {'; '.join(options)}"


def admit(folder: outdir.Folder, options: Sequence[str], overwrite: bool, resume: bool,
          dirs: Sequence[str], files: Sequence[str]) -> list[str]:
    """The results the folder holds, once it may be used as asked (outdir.FolderError, one line, when
    not): no link or wrong-type entry in it (`dirs`, `files`: the tool's own names); with --overwrite
    nothing the tool did not write; without --overwrite or --resume no result."""
    top = folder.top()
    owned = folder.owned()
    held = results([e.rel for e in top], owned.top())
    if overwrite:
        folder.check_overwrite(owned)
    elif held and not resume:
        raise outdir.FolderError(refusal(folder.tool, folder.root, held, options))
    elif held and not any(e.rel == SETTINGS_FILE and e.kind == "file" for e in top):
        raise outdir.FolderError(f"{folder.tool}: --resume refused, {folder.root} left untouched: it has "
                                 f"no readable {SETTINGS_FILE} (not written by this spec-ab); give another "
                                 "--out")
    folder.check(dirs, files)  # the whole folder walked (bounded) only once it is the tool's to use
    return held


@dataclass(frozen=True)
class Recorded:
    """What one run's files say about it (read by the command; None where a file is missing or unreadable)."""

    requests: bool
    """PREFIX_requests.csv exists."""
    run: dict | None
    """PREFIX_run.json."""
    design: dict | None
    """PREFIX_design.json."""
    unreadable: str | None = None
    """Why spec-verdict cannot read the run's files (a truncated or corrupt CSV), said by its reader."""


def options_of(argv: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """A Locust command line's options from `-f` on, as {option: values} (repeated ones' values joined in
    order), without the VOLATILE ones. A value may start with '-' (`--processes -1`): an option is `-` or
    `--` and a letter."""
    words = list(argv)
    start = words.index("-f") if "-f" in words else 0
    out: dict[str, tuple[str, ...]] = {}
    current = None
    for word in words[start:]:
        if _OPTION.match(word):
            name, eq, value = word.partition("=")
            current = name
            out.setdefault(name, ())
            if eq:
                out[name] += (value,)
        elif current is not None:
            out[current] += (word,)
    return {k: v for k, v in out.items() if k not in VOLATILE}


def _shown(values: tuple[str, ...] | None) -> str:
    if values is None:
        return "not given"
    return " ".join(values) or "set"


def options_difference(recorded: Sequence[str], now: Sequence[str]) -> str | None:
    """The first Locust option whose value differs, said as 'OPTION was A, now B'; None when the same."""
    old, new = options_of(recorded), options_of(now)
    for name in sorted(set(old) | set(new)):
        if old.get(name) != new.get(name):
            return f"{name} was {_shown(old.get(name))}, now {_shown(new.get(name))}"
    return None


def design_difference(recorded: Design, expected: Design) -> str | None:
    """The first field of the design (its clock aside) that differs."""
    old = replace(recorded, clock_unix_s=None).to_dict()
    new = replace(expected, clock_unix_s=None).to_dict()
    for key in new:
        if old.get(key) != new.get(key):
            return f"its design's {key} was {old.get(key)}, now {new.get(key)}"
    return None


def unfinished(found: Recorded, design: Design | None) -> str | None:
    """Why the run did not finish its ladder; None when it did."""
    if not found.requests:
        return "no requests file"
    run = found.run
    if run is None:
        return "no readable run record"
    ended, started = run.get("ended_unix_s"), run.get("started_unix_s")
    if not isinstance(ended, (int, float)) or not math.isfinite(ended):
        return "its run record never ended"
    if design is None:
        return "no readable design file"
    zero = design.clock_unix_s if design.clock_unix_s is not None else started
    if not isinstance(zero, (int, float)) or ended < zero + design.seconds - END_SLACK_S:
        return "it stopped before its ladder's end"
    if found.unreadable is not None:
        return f"its files do not read ({found.unreadable})"
    return None


def judge_run(found: Recorded, command: Sequence[str], expected: Design,
              now: Now | None = None) -> tuple[str | None, str | None]:
    """(why it is unfinished, how its settings or servers differ from `now`): both None when the run is
    kept."""
    try:
        design = Design.from_dict(found.design) if found.design is not None else None
    except ValueError:
        design = None
    why = unfinished(found, design)
    if why is not None:
        return why, None
    assert design is not None and found.run is not None
    recorded = found.run.get("command")
    if not isinstance(recorded, list) or not all(isinstance(w, str) for w in recorded):
        return None, "its run record has no command line"
    return None, (options_difference(recorded, command) or design_difference(design, expected)
                  or difference(found.run, now))


@dataclass(frozen=True)
class Plan:
    """What --resume does: the sessions (by position) kept and those measured now, with a line for each
    unfinished one; `conflict` (a finished run measured otherwise) refuses the resume."""

    kept: tuple[int, ...]
    todo: tuple[int, ...]
    notes: tuple[str, ...]
    conflict: str | None = None
    restored: tuple[tuple[int, int, Design], ...] = ()
    """(session, slot, design): the design files that kept runs lack, rebuilt, for the command to write."""


@dataclass(frozen=True)
class Expected:
    """One run of a session as this command would measure it."""

    name: str
    """'baseline r0'."""
    found: Recorded
    command: tuple[str, ...]
    design: Design
    now: Now | None = None
    """The prompts and the arm's server as this command finds them (ab/resume_check.py)."""


def rebuilt_design(run: Expected, session: Sequence[Expected]) -> Design | None:
    """The design file a run lacks, rebuilt: sequential, the design as planned (it has no clock); blocked,
    its slot's with the shared clock another run of its session holds; None when none does."""
    if not run.design.blocked:
        return run.design
    for other in session:
        try:
            design = Design.from_dict(other.found.design) if other.found.design is not None else None
        except ValueError:
            continue
        if design is not None and design.clock_unix_s is not None:
            return replace(run.design, clock_unix_s=design.clock_unix_s)
    return None


def plan(sessions: Sequence[Sequence[Expected]]) -> Plan:
    """Keep every session whose runs all finished as expected; measure the others. A finished run whose
    settings differ is a conflict: resuming would judge two settings as one. A finished run without its
    design file keeps it rebuilt (`rebuilt_design`); where it cannot be, the resume is refused too:
    measuring that session again would delete a finished run."""
    kept, todo, notes, restored = [], [], [], []
    for position, runs in enumerate(sessions):
        reasons, lost, rebuilt = [], [], []
        for slot, run in enumerate(runs):
            found = run.found
            if found.design is None and found.requests:
                design = rebuilt_design(run, runs)
                if design is None:  # judged from its start (the clock's zero was a few seconds later)
                    lost.append(run.name)
                    started = (found.run or {}).get("started_unix_s")
                    if isinstance(started, (int, float)):
                        found = replace(found, design=replace(run.design, clock_unix_s=started).to_dict())
                else:
                    found = replace(found, design=design.to_dict())
                    rebuilt.append((position, slot, design))
            why, differs = judge_run(found, run.command, run.design, run.now)
            if differs is not None:
                return Plan((), (), (), f"{run.name} was measured with other settings or servers (its "
                                        f"_run.json and _design.json): {differs}")
            if why is not None:
                reasons.append(f"{run.name}: {why}")
        if reasons:
            todo.append(position)
            if any(r.found.requests or r.found.run is not None for r in runs):
                notes.append(f"measuring {' + '.join(r.name for r in runs)} again ({'; '.join(reasons)})")
        elif lost:
            return Plan((), (), (), f"{lost[0]} finished, but its _design.json (the shared clock's zero) is "
                                    "missing and no other run of its session holds it: measuring the session "
                                    "again would delete a finished run; restore the file, or give another "
                                    "--out")
        else:
            kept.append(position)
            restored += rebuilt
    return Plan(tuple(kept), tuple(todo), tuple(notes), None, tuple(restored))


def settings_difference(recorded: object, now: dict) -> str | None:
    """How the folder's spec-ab.json differs from this command's servers; None when the same."""
    if not isinstance(recorded, dict) or recorded.get("schema") != SETTINGS_SCHEMA:
        return f"its {SETTINGS_FILE} is not one this spec-ab wrote"
    for key in now:
        if recorded.get(key) != now[key]:
            return f"{key} was {recorded.get(key)}, now {now[key]}"
    return None
