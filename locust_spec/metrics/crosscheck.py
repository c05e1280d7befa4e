"""Client totals from the request rows vs the server's counters over the run: disagreements as warnings."""

from __future__ import annotations

import csv
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from locust_spec.core.runfiles import ErrorKind, error_kind
from locust_spec.metrics.counters import SpecWindow

# Tolerances, and why:
# - Output tokens +-2%: both sides count the same tokens; what separates them is requests cut off at stop (the
#   server may have generated a few tokens the client never read) and rows whose count was estimated because
#   the server sent no usage. Beyond 2% the counters are not measuring this traffic (another tenant, another
#   replica, a restart that was missed).
# - Finished requests: exact, give or take one per request whose outcome the client could not see: those
#   interrupted at stop, and failures that were not an HTTP status (the server may have finished them).
# - Mean TPOT +-15%: the client's per-request TPOT also holds network and client scheduling delays between
#   its first and last token, a few percent at the loads we run; 15% leaves room for that while catching a
#   server histogram that measures something else (per-step instead of per-request, another model).
# - Acceptance +-0.05 absolute: per-request stats and counters come from the same engine, so they differ only
#   by the requests that carried no stats (cut off at stop) or other traffic.
TOKENS_REL = 0.02
TPOT_REL = 0.15
ACCEPTANCE_ABS = 0.05
# Server output tokens below this share of the client's: the counters are another server's, not this traffic.
FOREIGN_TOKENS_SHARE = 0.5

METRICS_OPTIONS = "locust --metrics-url; spec-ab --metrics-url-baseline / --metrics-url-candidate"
CANDIDATE_METRICS_OPTIONS = "locust --metrics-url; spec-ab --metrics-url-candidate"
"""The options that set the scraped URL, named by command: these hints reach users of both."""


@dataclass
class ClientTotals:
    """Sums over PREFIX_requests.csv rows; constant size whatever the run's length."""

    requests: int = 0
    ok: int = 0
    interrupted: int = 0
    unknown_outcome: int = 0
    output_tokens: int = 0
    estimated_token_rows: int = 0
    tpot_sum_ms: float = 0.0
    tpot_count: int = 0
    spec_accepted: int = 0
    spec_draft: int = 0

    @property
    def mean_tpot_ms(self) -> float | None:
        return self.tpot_sum_ms / self.tpot_count if self.tpot_count else None

    @property
    def acceptance_rate(self) -> float | None:
        return self.spec_accepted / self.spec_draft if self.spec_draft else None


def _int(cell: str | None) -> int | None:
    return int(float(cell)) if cell not in (None, "") else None


def totals_from_rows(rows: Iterable[dict]) -> ClientTotals:
    """Fold request rows (as `csv.DictReader` gives them) into totals; a bad cell names its row."""
    t = ClientTotals()
    for n, row in enumerate(rows, start=2):  # row 1 is the header
        try:
            _add(t, row)
        except (TypeError, ValueError) as e:
            raise ValueError(f"requests row {n}: {e}") from None
    return t


def _add(t: ClientTotals, row: dict) -> None:
    t.requests += 1
    error = row.get("error") or ""
    tokens = _int(row.get("output_tokens"))
    t.output_tokens += tokens or 0
    t.estimated_token_rows += (_int(row.get("tokens_estimated")) or 0) > 0
    if not error:
        t.ok += 1
        if row.get("tpot_ms"):
            t.tpot_sum_ms += float(row["tpot_ms"])
            t.tpot_count += 1
        accepted, drafted = _int(row.get("spec_accepted_tokens")), _int(row.get("spec_draft_tokens"))
        if accepted is not None and drafted is not None:
            t.spec_accepted += accepted
            t.spec_draft += drafted
    elif error_kind(error) is ErrorKind.INTERRUPTED:
        t.interrupted += 1
    elif error_kind(error) is not ErrorKind.HTTP:
        t.unknown_outcome += 1


def read_client_totals(path: Path) -> ClientTotals:
    """Totals of a PREFIX_requests.csv, read row by row; a last line still being written is left out."""
    with path.open(newline="") as f:
        return totals_from_rows(csv.DictReader(line for line in f if line.endswith("\n")))


@dataclass(frozen=True)
class Check:
    """One comparison: both sides, the allowed difference, and the warning when it is exceeded."""

    name: str
    client: float
    server: float
    allowed: float
    warning: str | None


def _check(name: str, client: float, server: float, allowed: float, unit: str, why: str) -> Check:
    diff = client - server
    warning = None
    if abs(diff) > allowed:
        warning = (
            f"cross-check {name}: client {client:g}{unit} vs server {server:g}{unit}"
            f" (difference {diff:+g}{unit}, allowed +-{allowed:g}{unit}); {why}"
        )
    return Check(name, client, server, allowed, warning)


def foreign(client: ClientTotals, window: SpecWindow) -> bool:
    """The server counted far fewer tokens than this client received: its counters are another server's."""
    return (window.generation_tokens is not None and client.output_tokens > 0
            and window.generation_tokens < FOREIGN_TOKENS_SHARE * client.output_tokens)


def cross_check(client: ClientTotals, window: SpecWindow, unseen: int = 0) -> list[Check]:
    """Compare what the client saw with the server's counters over the same run; skips what is missing.

    `unseen`: requests sent that have no row (a lost worker's): the server may have finished them."""
    checks: list[Check] = []
    lost = f"{unseen} requests of a lost worker have no row, or " if unseen else ""
    if window.generation_tokens is not None:
        est = f" ({client.estimated_token_rows} rows estimated)" if client.estimated_token_rows else ""
        why = f"{lost}the server counted different tokens than the client received{est}"
        if foreign(client, window):
            why = ("the scraped counters are likely another server's: check the metrics URL "
                   f"({METRICS_OPTIONS})")
        checks.append(_check(
            "output tokens", client.output_tokens, window.generation_tokens,
            TOKENS_REL * max(client.output_tokens, window.generation_tokens), "",
            why,
        ))
    if window.requests_success is not None:
        checks.append(_check(
            "finished requests", client.ok, window.requests_success,
            client.interrupted + client.unknown_outcome + unseen, "",
            f"{lost}other traffic on the server, or the metrics come from another server ({METRICS_OPTIONS})",
        ))
    if window.mean_tpot_ms is not None and client.mean_tpot_ms is not None:
        checks.append(_check(
            "mean TPOT", round(client.mean_tpot_ms, 3), round(window.mean_tpot_ms, 3),
            round(TPOT_REL * window.mean_tpot_ms, 3), " ms",
            "client and server disagree on per-token time",
        ))
    if window.acceptance_rate is not None and client.acceptance_rate is not None:
        checks.append(_check(
            "acceptance", round(client.acceptance_rate, 4), round(window.acceptance_rate, 4),
            ACCEPTANCE_ABS, "", "per-request stats and server counters disagree",
        ))
    return checks


def warnings(checks: Iterable[Check]) -> list[str]:
    return [c.warning for c in checks if c.warning]


def summary(client: ClientTotals, checks: Iterable[Check]) -> dict:
    """The `client` and `crosscheck` parts of PREFIX_summary.json."""
    client_part = {**asdict(client), "mean_tpot_ms": client.mean_tpot_ms,
                   "acceptance_rate": client.acceptance_rate}
    return {"client": client_part, "crosscheck": {c.name: asdict(c) for c in checks}}
