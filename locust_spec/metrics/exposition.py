"""Prometheus text and the server-metrics CSV <-> `Sample` / `Snapshot` (pure)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

Labels = tuple[tuple[str, str], ...]

CSV_COLUMNS = ("timestamp_unix_s", "url", "metric", "labels", "value")


@dataclass(frozen=True)
class Sample:
    """One exposed sample: `metric` is the name as exposed (with `_total`, `_sum`, `_created`...)."""

    metric: str
    labels: Labels
    value: float


@dataclass(frozen=True)
class Snapshot:
    """Every sample one URL exposed at one scrape."""

    timestamp_unix_s: float
    url: str
    samples: tuple[Sample, ...]


@dataclass(frozen=True)
class Parsed:
    """What a scrape's text gave: the samples, and how many lines could not be read."""

    samples: list[Sample]
    bad_lines: int


def _samples(text: str) -> Iterator[Sample]:
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            yield Sample(s.name, tuple(sorted(s.labels.items())), float(s.value))


def parse_exposition_checked(text: str) -> Parsed:
    """Parse Prometheus text; a line the parser rejects (cut-off text, a shell prompt, HTML) is skipped
    and counted rather than losing the whole scrape."""
    try:
        return Parsed(list(_samples(text)), 0)
    except ValueError:
        pass
    # Line by line loses the TYPE context, but sample names and values are read the same without it.
    samples: list[Sample] = []
    bad = 0
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            samples.extend(_samples(line + "\n"))
        except ValueError:
            bad += 1
    return Parsed(samples, bad)


def parse_exposition(text: str) -> list[Sample]:
    """Parse Prometheus text exposition into samples, skipping lines that cannot be read."""
    return parse_exposition_checked(text).samples


# Label values may hold anything; `;` separates pairs and `%` escapes, so both are percent-encoded.
def _escape(value: str) -> str:
    return value.replace("%", "%25").replace(";", "%3B").replace("\n", "%0A")


def _unescape(value: str) -> str:
    return value.replace("%0A", "\n").replace("%3B", ";").replace("%25", "%")


def encode_labels(labels: Labels) -> str:
    """`k=v;k=v` in sorted key order (the CSV's `labels` cell)."""
    return ";".join(f"{k}={_escape(v)}" for k, v in sorted(labels))


def decode_labels(cell: str) -> Labels:
    if not cell:
        return ()
    pairs = []
    for part in cell.split(";"):
        key, sep, value = part.partition("=")
        if not sep:
            raise ValueError(f"label {part!r} is not k=v")
        pairs.append((key, _unescape(value)))
    return tuple(sorted(pairs))


def rows_from_snapshot(snapshot: Snapshot) -> Iterator[tuple[str, str, str, str, str]]:
    """The CSV rows of one snapshot, in `CSV_COLUMNS` order."""
    ts = f"{snapshot.timestamp_unix_s:.3f}"
    for s in snapshot.samples:
        yield ts, snapshot.url, s.metric, encode_labels(s.labels), repr(s.value)


def snapshots_from_rows(rows: Iterable[dict], *, keep_buckets: bool = False) -> list[Snapshot]:
    """Read back server-metrics CSV rows (dicts, as `csv.DictReader` gives them) into snapshots.

    Consecutive rows with the same timestamp and URL form one snapshot. Histogram `_bucket` rows are
    dropped unless asked for: nothing in the counter windows reads them and they are most of the rows.
    A malformed row raises ValueError naming its row number.
    """
    snapshots: list[Snapshot] = []
    key: tuple[str, str] | None = None
    samples: list[Sample] = []
    for n, row in enumerate(rows, start=2):  # row 1 is the header
        try:
            row_key = (row["timestamp_unix_s"], row["url"])
            metric = row["metric"]
            if key is not None and row_key != key:
                snapshots.append(Snapshot(float(key[0]), key[1], tuple(samples)))
                samples = []
            key = row_key
            if keep_buckets or not metric.endswith("_bucket"):
                samples.append(Sample(metric, decode_labels(row["labels"] or ""), float(row["value"])))
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"server metrics row {n}: {e}") from None
    if key is not None:
        try:
            snapshots.append(Snapshot(float(key[0]), key[1], tuple(samples)))
        except ValueError as e:
            raise ValueError(f"server metrics: bad timestamp {key[0]!r}: {e}") from None
    return snapshots
