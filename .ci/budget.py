"""CI's time budget: each tier's measured wall seconds against its budget, all budgets stated here.

`make test TIMES=FILE` and `.ci/run` append one `tier<TAB>seconds` line per tier they timed; this reads them,
prints each beside its budget and exits 1 naming every tier more than TOLERANCE over its budget, or timed
without one (a new tier gets a budget when it lands). CI has 30 minutes: a suite that grows is seen here,
while there is still room, not when the next landing is stopped by the time limit.

    python3 .ci/budget.py FILE
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

# Seconds on CI's 2-core machine. The first three run inside `make test`: the real-vLLM tier beside the
# unit, hostile and files tier (one core each), then the end-to-end tier alone, so `make test` takes the
# longer of the first two plus the third. Set from the merged tree's own `.ci/run` (a quiet 2-core VM):
# unit, hostile and files 423 s, real vLLM 404 s, end-to-end 772 s, make test 1,195 s, wheel check 114 s,
# make ab and make lint 223 s, the whole run 1,426 s. Issue #44 asks for make test within 900 s and the
# run within 1,200 s: not met yet, so these are what the suite takes now (a budget it already breaks would
# fail every run and land nothing); lower them as the suite gets faster.
BUDGETS_S: dict[str, float] = {
    "unit, hostile and files": 450,
    "real vLLM": 430,
    "end-to-end": 800,
    "make test": 1250,
    "wheel check": 240,
    "make ab and make lint": 280,
    "ci": 1550,
}
TOLERANCE = 0.10


@dataclass(frozen=True)
class Tier:
    name: str
    seconds: float
    budget_s: float | None

    @property
    def over(self) -> bool:
        return self.budget_s is None or self.seconds > self.budget_s * (1 + TOLERANCE)


def parse_times(text: str) -> dict[str, float]:
    """`tier<TAB>seconds` lines; a tier timed twice keeps its last time. A malformed line is a ValueError
    naming it."""
    times: dict[str, float] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        name, sep, seconds = line.rpartition("\t")
        try:
            if not sep or not name.strip():
                raise ValueError
            times[name.strip()] = float(seconds)
        except ValueError:
            raise ValueError(f"line {number} is not 'tier<TAB>seconds': {line!r}") from None
    return times


def judge(times: dict[str, float], budgets: dict[str, float] = BUDGETS_S) -> list[Tier]:
    return [Tier(name, seconds, budgets.get(name)) for name, seconds in times.items()]


def report(tiers: list[Tier]) -> list[str]:
    """One line per tier, then one line per tier that fails the guard."""
    lines = []
    for t in tiers:
        against = f"budget {t.budget_s:.0f} s ({t.seconds / t.budget_s:.0%})" if t.budget_s else "no budget"
        lines.append(f"{t.name:<26} {t.seconds:7.0f} s  {against}")
    for t in tiers:
        if t.budget_s is None:
            lines.append(f"budget: the tier '{t.name}' has no budget: state one in .ci/budget.py")
        elif t.over:
            lines.append(f"budget: the tier '{t.name}' took {t.seconds:.0f} s, over its {t.budget_s:.0f} s "
                         f"by more than {TOLERANCE:.0%}")
    return lines


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    try:
        tiers = judge(parse_times(Path(argv[0]).read_text()))
    except (OSError, ValueError) as exc:
        print(f"budget: {argv[0]}: {exc}", file=sys.stderr)
        return 2
    print("\n".join(report(tiers)))
    return 1 if any(t.over for t in tiers) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
