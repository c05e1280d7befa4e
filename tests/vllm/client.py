"""Test-side view of a vLLM server, independent of the product: raw SSE events and raw counter totals."""

from __future__ import annotations

import json
import urllib.request
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from tests.vllm.server import MODEL_NAME

STREAM_OPTIONS = {"include_usage": True, "continuous_usage_stats": True}
SPEC = "vllm:spec_decode_num_"
GENERATION = "vllm:generation_tokens_total"


def _post(url: str, body: dict, timeout: float = 120):
    request = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    return urllib.request.urlopen(request, timeout=timeout)


def chat_body(prompt: str, max_tokens: int, stream: bool, **extra) -> dict:
    body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
            "temperature": 0, "stream": stream, **extra}
    if stream:
        body["stream_options"] = STREAM_OPTIONS
    return body


def stream_chat(url: str, prompt: str, max_tokens: int = 200, **extra) -> list[dict | str]:
    """Every `data:` payload of one streamed chat completion, decoded; `[DONE]` kept as the string."""
    events: list[dict | str] = []
    with _post(url, chat_body(prompt, max_tokens, True, **extra)) as response:
        for raw in response:
            line = raw.decode().rstrip("\r\n")
            if line.startswith("data: "):
                payload = line[len("data: "):]
                events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


def complete(url: str, prompt: str, max_tokens: int = 200, **extra) -> dict:
    with _post(url, chat_body(prompt, max_tokens, False, **extra)) as response:
        return json.loads(response.read())


def token_increments(events: list[dict | str]) -> list[int]:
    """Tokens each choice-carrying chunk added, from the cumulative `usage.completion_tokens`."""
    steps, previous = [], 0
    for event in events:
        if isinstance(event, dict) and event.get("choices"):
            total = event["usage"]["completion_tokens"]
            steps.append(total - previous)
            previous = total
    return steps


def final_usage(events: list[dict | str]) -> dict:
    return next(e for e in events if isinstance(e, dict) and not e.get("choices"))["usage"]


def spec_stats(events: list[dict | str]) -> dict | None:
    final = next(e for e in events if isinstance(e, dict) and not e.get("choices"))
    return (final.get("metrics") or {}).get("speculative_decoding")


@dataclass(frozen=True)
class SpecCounters:
    """The server's own speculative-decoding counters, summed over engines."""

    drafts: float
    draft_tokens: float
    accepted: float
    per_position: tuple[float, ...]
    generation_tokens: float
    families: frozenset[str]

    def __sub__(self, before: SpecCounters) -> SpecCounters:
        positions = tuple(a - b for a, b in zip(self.per_position, before.per_position, strict=True))
        return SpecCounters(self.drafts - before.drafts, self.draft_tokens - before.draft_tokens,
                            self.accepted - before.accepted, positions,
                            self.generation_tokens - before.generation_tokens, self.families)

    @property
    def acceptance(self) -> float:
        return self.accepted / self.draft_tokens


def metrics_text(url: str) -> str:
    with urllib.request.urlopen(url + "/metrics", timeout=30) as response:
        return response.read().decode()


def spec_counters(url: str) -> SpecCounters:
    totals: dict[str, float] = {}
    positions: dict[int, float] = {}
    families = set()
    for family in text_string_to_metric_families(metrics_text(url)):
        families.add(family.name)
        for sample in family.samples:
            if sample.name == SPEC + "accepted_tokens_per_pos_total":
                pos = int(sample.labels["position"])
                positions[pos] = positions.get(pos, 0.0) + sample.value
            elif sample.name.endswith("_total") and sample.name.startswith((SPEC, GENERATION)):
                totals[sample.name] = totals.get(sample.name, 0.0) + sample.value
    return SpecCounters(totals.get(SPEC + "drafts_total", 0.0), totals.get(SPEC + "draft_tokens_total", 0.0),
                        totals.get(SPEC + "accepted_tokens_total", 0.0),
                        tuple(positions[p] for p in sorted(positions)), totals.get(GENERATION, 0.0),
                        frozenset(families))
