"""Exposition text (Prometheus text 0.0.4 or OpenMetrics 1.0) and the server-metrics CSV <-> `Sample` /
`Snapshot` (pure).

Counters are read by their sample names (`vllm:spec_decode_num_drafts_total`), which both formats share,
never by family: vLLM's Python frontend writes `# TYPE vllm:x_total counter` (Prometheus text), its Rust
frontend (`VLLM_USE_RUST_FRONTEND=1`) `# TYPE vllm:x counter` with `vllm:x_total` samples and `# EOF`
(OpenMetrics, whatever Accept asks for). prometheus-client's two parsers each read only one of them: the
classic one files OpenMetrics samples under `unknown` families and, before 0.21, reads an exemplar
(`... 1120 # {trace_id="..."} 1.0`) as a label and takes the exemplar's value for the counter's; the
OpenMetrics one rejects Prometheus text (`Clashing name`). So each text goes to the parser of its format.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families

Labels = tuple[tuple[str, str], ...]



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


def is_openmetrics(text: str) -> bool:
    """OpenMetrics ends with `# EOF` (its spec requires it) and may declare units; Prometheus text has
    neither. A cut-off OpenMetrics answer without either is read as Prometheus text, line by line."""
    return text.rstrip().endswith("\n# EOF") or text.strip() == "# EOF" or "\n# UNIT " in text


def _from_families(families) -> Iterator[Sample]:
    for family in families:
        for s in family.samples:
            yield Sample(s.name, tuple(sorted(s.labels.items())), float(s.value))


def _samples(text: str) -> Iterator[Sample]:
    return _from_families(text_string_to_metric_families(text))


def without_exemplar(line: str) -> str:
    """A sample line without its OpenMetrics exemplar (` # {labels} value [timestamp]`): outside a quoted
    label value, a `#` after the sample can only open one."""
    if "#" not in line:
        return line
    quoted = escaped = False
    for i, char in enumerate(line):
        if escaped:
            escaped = False
        elif char == "\\" and quoted:
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif char == "#" and not quoted and i and line[i - 1] in " \t":
            return line[:i].rstrip()
    return line


def _sample_lines(text: str) -> list[str]:
    """The text's sample lines (comments, `# EOF` and blank lines left out), exemplars removed."""
    return [without_exemplar(line) for line in text.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def parse_exposition_checked(text: str) -> Parsed:
    """Parse exposition text in either format; a line the parser rejects (cut-off text, a shell prompt,
    HTML) is skipped and counted rather than losing the whole scrape."""
    if is_openmetrics(text):
        try:
            return Parsed(list(_from_families(openmetrics_families(text))), 0)
        except Exception:  # noqa: BLE001 - the strict parser rejects a whole text for one bad line
            pass
    lines = _sample_lines(text)
    try:
        return Parsed(list(_samples("\n".join(lines) + "\n")), 0)
    except ValueError:
        pass
    # Line by line loses the TYPE context, but sample names and values are read the same without it.
    samples: list[Sample] = []
    bad = 0
    for line in lines:
        try:
            samples.extend(_samples(line + "\n"))
        except ValueError:
            bad += 1
    return Parsed(samples, bad)


def parse_exposition(text: str) -> list[Sample]:
    """Parse exposition text (either format) into samples, skipping lines that cannot be read."""
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
    """The CSV rows of one snapshot, in `SERVER_METRICS_COLUMNS` order (core/runfiles.py)."""
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
