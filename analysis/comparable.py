"""Whether two arms' runs measured the same thing, so that their difference is speculation's (pure).

A verdict is a comparison: every run of both arms must have sent the same prompts (by content), with the
same max_tokens, temperature, ignore_eos, seed, response format and prompt filters, under the same design
and the same Locust options that shape the load (the ladder, the rates, the arrivals). Within one arm,
every run must also have met the same server (the model it loaded, its version, its speculative config
as recorded): repeats of one arm measured on two servers (a redeploy between Ctrl-C and `--resume`) are
two arms pooled as one. Each difference is one line naming it and what each run had; spec-verdict and
spec-ab refuse them unless `--force`, and then the report says on its first screen what differs.

Runs without a PREFIX_run.json are left out of the load's checks (provenance.py says they are unknown).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import PurePath

from locust_spec.core.design import Design

from .provenance import FORCE, Provenance, ProvenanceError

LOAD_KEYS = ("max_tokens", "temperature", "ignore_eos", "seed", "response_format", "prompt_filters")
SHORT = {"-u": "--users", "-r": "--spawn-rate", "-t": "--run-time"}
LOAD_OPTIONS = ("--users", "--spawn-rate", "--run-time", "--levels", "--stage-time", "--warmup", "--rates",
                "--rate", "--arrival", "--burstiness", "--max-concurrency")
"""Locust options that shape the load (their values are compared as the run's command gave them)."""
SHOWN = 60
"""Characters of one value in a line: a prompt file's hash is cut to 12 before it."""


@dataclass(frozen=True)
class ComparedRun:
    """One run as the gate sees it."""

    label: str
    """'baseline', or 'baseline 2' when the arm has several runs."""
    arm: str
    provenance: Provenance
    design: Design | None


@dataclass(frozen=True)
class Difference:
    """One setting that differs between runs that should share it: each value with the runs that had it."""

    what: str
    values: tuple[tuple[str, tuple[str, ...]], ...]

    def line(self) -> str:
        shown = "; ".join(f"{', '.join(runs)}: {value[:SHOWN]}" for value, runs in self.values)
        return f"{self.what} differ ({shown})"


def runs_of(baseline: Sequence[tuple[Provenance, Design | None]],
            candidate: Sequence[tuple[Provenance, Design | None]]) -> list[ComparedRun]:
    return [ComparedRun(arm + (f" {i + 1}" if len(group) > 1 else ""), arm, p, d)
            for arm, group in (("baseline", baseline), ("candidate", candidate))
            for i, (p, d) in enumerate(group)]


def command_options(argv: object) -> dict[str, str]:
    """The load-shaping options of a recorded Locust command line ({option: its values joined})."""
    if not isinstance(argv, list):
        return {}
    out: dict[str, list[str]] = {}
    current = None
    for word in map(str, argv):
        if word.startswith("-") and not word[1:2].isdigit():
            name, eq, value = word.partition("=")
            current = SHORT.get(name, name)
            if current in LOAD_OPTIONS:
                out.setdefault(current, []).extend([value] if eq else [])
            else:
                current = None
        elif current is not None:
            out[current].append(word)
    return {k: " ".join(v) for k, v in out.items()}


def prompts_text(p: Provenance) -> str:
    """The run's prompt files by content ('code 1a2b3c4d5e6f, mine.jsonl 9f8e...'), from its list: each
    file by its name alone, not its folder (each arm may read its own copy of one file)."""
    files = p._get("load", "prompts")
    named = sorted(f"{PurePath(str(f.get('file'))).name} {str(f.get('sha256'))[:12]}"
                   for f in files if isinstance(f, dict))
    return ", ".join(named) or "none"


def design_text(design: Design | None) -> str:
    """The design without what differs between any two arms of one design (its clock, the arm's slot)."""
    if design is None:
        return "sequential (no design file)"
    d = replace(design, clock_unix_s=None, slot=0)
    blocks = f", {d.n_blocks} blocks of {d.block_s:g}s" if d.blocked else ""
    ladder = f"rates {list(d.rates)}" if d.rates else f"levels {list(d.levels)}"
    order = f", order {list(d.order)}" if d.order else ""
    return f"{d.kind}, {ladder}, {d.stage_s:g}s stages, {d.warmup_s:g}s warm-up{blocks}{order}"


def _value(value: object) -> str:
    return "not given" if value is None or value == "" else str(value)


def load_settings(run: ComparedRun) -> dict[str, str]:
    """What every request of the run was sent with and the load's shape, by name: only what its record
    holds (a record without a load or a command says nothing of them)."""
    p = run.provenance
    load, command = p._get("load"), p._get("command")
    out = {}
    if isinstance(load, dict):
        if isinstance(load.get("prompts"), list):
            out["prompt sets (by content)"] = prompts_text(p)
        out.update({key: _value(load.get(key)) for key in LOAD_KEYS})
    if isinstance(command, list):
        options = command_options(command)
        out.update({f"Locust option {name}": options.get(name, "not given") for name in LOAD_OPTIONS})
    return out


def server_facts(run: ComparedRun) -> dict[str, str]:
    """What the run's server was, as far as its record knows."""
    p = run.provenance
    if not p.known:
        return {}
    facts = {"models": p.model_identity, "server versions": p._get("server", "version"),
             "speculative configs": p._get("speculative_config", "config")}
    return {key: str(value) for key, value in facts.items() if value is not None}


def _group(what: str, values: Sequence[tuple[str, str]]) -> Difference | None:
    by_value: dict[str, list[str]] = {}
    for label, value in values:
        by_value.setdefault(value, []).append(label)
    if len(by_value) < 2:
        return None
    return Difference(what, tuple((value, tuple(labels)) for value, labels in by_value.items()))


def differences(runs: Sequence[ComparedRun]) -> list[Difference]:
    """Every setting the runs of both arms should share and do not, then every server fact the runs of one
    arm should share and do not (a resumed mix)."""
    out = []
    settings = [(run.label, load_settings(run)) for run in runs]
    keys = dict.fromkeys(k for _, s in settings for k in s)
    for key in keys:
        out.append(_group(f"the runs' {key}", [(label, s[key]) for label, s in settings if key in s]))
    out.append(_group("the runs' designs", [(run.label, design_text(run.design)) for run in runs]))
    for arm in ("baseline", "candidate"):
        facts = [(run.label, server_facts(run)) for run in runs if run.arm == arm]
        for key in dict.fromkeys(k for _, f in facts for k in f):
            out.append(_group(f"the {arm}'s runs' {key} (one arm, two servers)",
                              [(label, f[key]) for label, f in facts if key in f]))
    return [d for d in out if d is not None]


def check(runs: Sequence[ComparedRun], force: bool) -> list[str]:
    """ProvenanceError naming the first difference (one line) unless `force`; with it, every difference's
    line, to be shown on the report's first screen."""
    found = differences(runs)
    if found and not force:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise ProvenanceError(f"not comparable: {found[0].line()}{more}; compare them anyway with {FORCE}")
    return [d.line() for d in found]
