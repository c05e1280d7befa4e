"""Checks before any sweep: both arms answer, serve the model, stream a token, expose the right counters, and
the prompts fit the context. Every problem is one line naming the option that fixes it.

The judging is pure (`judge`, on `Observed` facts); `check` gathers the facts over HTTP, both arms at once,
each call bounded by a timeout, so a dead endpoint fails in seconds instead of after a whole sweep.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import orjson

from locust_spec.client import context, server_api, sse
from locust_spec.core.max_tokens import effective_max_tokens
from locust_spec.core.prompts import Prompt
from locust_spec.metrics import counters
from locust_spec.metrics.exposition import Parsed, Snapshot
from locust_spec.recording.scraper import TOKEN_ENV, default_metrics_url, display_url, http_fetcher

# A dead host refuses at once; a black-holed one costs this much. /v1/models and /metrics answer in ms.
CALL_TIMEOUT_S = 5.0
# The probe prefills the longest prompt before its first token: allow a loaded server some seconds.
PROBE_TIMEOUT_S = 30.0
# Tokens read from each probe before closing it: enough for a speculating server to draft at least once.
PROBE_TOKENS = 16
PROBES_PER_ARM = 2
COUNTED = 16
"""With the server's tokenizer: the prompts bytes/4 ranks first that are counted by it."""
COUNTED_MAX = 64
"""At most this many /tokenize calls per arm (each bounded by CALL_TIMEOUT_S; vLLM answers in ms)."""
MARGIN = 0.25
MARGIN_PROBES = 2
"""Without a tokenizer: probe up to this many more prompts whose bytes/4 estimate comes within MARGIN of
the context."""
# Bytes of a streamed line or an error body kept: a probe never holds more than this.
MAX_LINE_BYTES = 64 * 1024
# Words with which vLLM, SGLang and spec-sim say that prompt + max_tokens exceed the context.
CONTEXT_WORDS = ("context length", "maximum context", "max_model_len", "too long", "context window")


@dataclass(frozen=True)
class Arm:
    """One server to check, and the options of the calling command that set its URLs (named in fixes)."""

    name: str
    url: str
    metrics_url: str | None
    """None: URL/metrics; "off": not scraped."""
    speculates: bool
    url_flag: str
    metrics_flag: str

    @property
    def scraped_url(self) -> str | None:
        if self.metrics_url is not None and self.metrics_url.strip().lower() == "off":
            return None
        return self.metrics_url or default_metrics_url(self.url)


@dataclass(frozen=True)
class Flags:
    """The calling command's option names for what every arm shares."""

    model: str = "--model"
    prompts: str = "--prompts"
    max_tokens: str = "--max-tokens"
    max_prompt_chars: str = "--max-prompt-chars"


SPEC_AB = Flags()
"""spec-ab's (and the Locust plugin's) names."""


@dataclass(frozen=True)
class Credentials:
    """The API key and metrics bearer token; never shown (repr hides them)."""

    api_key: str = field(default="", repr=False)
    metrics_token: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class Problem:
    arm: str
    what: str
    fix: str
    fatal: bool = True

    def line(self) -> str:
        return f"preflight {'FAILED' if self.fatal else 'warning'}: {self.arm}: {self.what}; fix: {self.fix}"


@dataclass(frozen=True)
class Probe:
    """One streamed request: tokens seen before it was closed, or why none came."""

    prompt_id: str
    tokens: int
    error: str | None
    status: int | None = None


@dataclass(frozen=True)
class Observed:
    """What one arm answered. `models` is None when /v1/models could not be read (`models_error` says why)."""

    models: tuple[str, ...] | None
    models_error: str | None
    max_model_len: int | None
    model: str | None
    probes: tuple[Probe, ...]
    metrics_before: Parsed | None
    metrics_after: Parsed | None
    metrics_error: str | None
    left_out: tuple[context.TooLong, ...] = ()
    """Prompts that cannot fit its context with the max_tokens they are sent with: the runs leave them out
    (wiring/run.py), so the probes skip them too."""
    counted: bool = False
    """Whether `left_out` was counted by the server's /tokenize (else estimated from below)."""


def max_tokens_of(prompt: Prompt, max_tokens: int | None) -> int:
    """What the runs send with `prompt` under `--max-tokens` (core/max_tokens.py): never its own above it."""
    return effective_max_tokens(prompt.max_tokens, max_tokens)


def estimated_tokens(prompt: Prompt) -> int:
    """Prompt tokens by about 4 bytes a token, with no tokenizer at hand."""
    return len(orjson.dumps(prompt.messages)) // 4


def riskiest(prompts: Sequence[Prompt], max_tokens: int | None, k: int = PROBES_PER_ARM,
             count: Callable[[Prompt], int] | None = None, max_model_len: int | None = None) -> list[Prompt]:
    """The prompts most likely to overflow the context: most prompt tokens plus max_tokens.

    With the server's tokenizer (`count`, its POST /tokenize) the prompts are ranked by their own tokens:
    those bytes/4 puts near the top (`COUNTED` of them) and, with the context known, every one that might
    not fit by the bytes' upper bound (context.upper_bound), up to `COUNTED_MAX`. Without one, bytes/4
    ranks them, and with the context known the probes also take up to `MARGIN_PROBES` more whose estimate
    comes within `MARGIN` of it (bytes/4 misjudges code and non-English text by that much); the server,
    which answers them, is the judge."""
    def estimate(p: Prompt) -> int:
        return estimated_tokens(p) + max_tokens_of(p, max_tokens)

    by_estimate = sorted(prompts, key=estimate, reverse=True)
    if count is None:
        chosen = by_estimate[:k]
        if max_model_len is not None:
            near = [p for p in by_estimate[k:] if estimate(p) * (1 + MARGIN) > max_model_len]
            chosen += near[:MARGIN_PROBES]
        return chosen
    doubtful = [] if max_model_len is None else [
        p for p in by_estimate if context.upper_bound(p) + max_tokens_of(p, max_tokens) > max_model_len]
    asked = list({p.id: p for p in [*by_estimate[:COUNTED], *doubtful]}.values())[:COUNTED_MAX]
    need = {}
    for p in asked:
        try:
            need[p.id] = count(p) + max_tokens_of(p, max_tokens)
        except (OSError, ValueError, AttributeError):
            need[p.id] = estimate(p)
    return sorted(asked, key=lambda p: need[p.id], reverse=True)[:k]


def _models_fix(arm: Arm, error: str) -> str:
    if "HTTP 401" in error or "HTTP 403" in error:
        return "set OPENAI_API_KEY to the server's API key"
    if "HTTP 404" in error:
        return f"give {arm.url_flag} the root URL of an OpenAI-compatible server (e.g. http://host:8000)"
    return f"start the server, or correct {arm.url_flag}"


def _judge_models(arm: Arm, seen: Observed, model: str, flags: Flags) -> list[Problem]:
    if seen.models is None:
        error = seen.models_error or "no answer"
        return [Problem(arm.name, f"cannot read {display_url(arm.url)}/v1/models ({error})",
                        _models_fix(arm, error))]
    if not seen.models:
        return [Problem(arm.name, f"{display_url(arm.url)}/v1/models lists no model",
                        "check the server's log")]
    if model and model not in seen.models:
        return [Problem(arm.name, f"model {model!r} is not served there (it serves {', '.join(seen.models)})",
                        f"pass {flags.model} {seen.models[0]}")]
    return []


def _is_context(error: str) -> bool:
    return any(word in error.lower() for word in CONTEXT_WORDS)


# How vLLM ("... (P in the messages, M in the completion)", "... has P input tokens") and spec-sim ("the
# prompt has P tokens") give the prompt's length in their context-length 400s.
_CONTEXT_LEN = re.compile(r"maximum context length is (\d+)")
_PROMPT_LEN = re.compile(r"(?:prompt has (\d+)|(\d+) in the messages|has (\d+) input tokens)")


def _context_fix(error: str, flags: Flags) -> str:
    """Lower max_tokens when that makes room; when the prompt alone fills the context, drop the prompt."""
    context, prompt = _CONTEXT_LEN.search(error), _PROMPT_LEN.search(error)
    if context and prompt:
        room = int(context[1]) - int(next(g for g in prompt.groups() if g))
        if room > 0:
            return f"pass {flags.max_tokens} {room} or less"
        return (f"leave that prompt out ({flags.max_prompt_chars} below its length) or its prompt set "
                f"({flags.prompts})")
    return f"lower {flags.max_tokens}, or leave out its prompt set ({flags.prompts})"


def _judge_probes(arm: Arm, seen: Observed, flags: Flags) -> list[Problem]:
    out = []
    for probe in seen.probes:
        if probe.error and probe.status == 400 and _is_context(probe.error):
            out.append(Problem(arm.name, f"prompt {probe.prompt_id!r} does not fit the context "
                                         f"({probe.error})", _context_fix(probe.error, flags)))
        elif probe.error:
            fix = (f"check {flags.model} and the prompts against the server's log" if probe.status
                   else f"check that the server at {arm.url_flag} is up and not overloaded")
            out.append(Problem(arm.name, f"no streamed token for prompt {probe.prompt_id!r} ({probe.error})",
                               fix))
        elif probe.tokens == 0:
            out.append(Problem(arm.name, f"the stream for prompt {probe.prompt_id!r} ended without a token",
                               "check the server's log"))
    return out


def _judge_context(arm: Arm, seen: Observed, prompts: Sequence[Prompt], max_tokens: int | None,
                   flags: Flags) -> list[Problem]:
    """max_tokens alone at or above the context can never fit, whatever the prompt."""
    if seen.max_model_len is None:
        return []
    over = [p for p in prompts if max_tokens_of(p, max_tokens) >= seen.max_model_len]
    if not over:
        return []
    asked = max(max_tokens_of(p, max_tokens) for p in over)
    return [Problem(arm.name, f"{len(over)} prompt(s) ask for up to {asked} tokens, at or above the model's "
                              f"context of {seen.max_model_len} (max_model_len)",
                    f"pass {flags.max_tokens} below {seen.max_model_len}")]


def _judge_fit(arm: Arm, seen: Observed, prompts: Sequence[Prompt], flags: Flags) -> list[Problem]:
    """Prompts that cannot fit the context are left out of the runs (a note, as Locust's warning); none
    left is fatal. Those whose max_tokens alone fills the context are _judge_context's."""
    length = seen.max_model_len
    found = [f for f in seen.left_out if length is not None and f.max_tokens < length]
    if not found:
        return []
    if len(seen.left_out) >= len(prompts):
        return [Problem(arm.name, f"no prompt fits the model's context of {length} (max_model_len) with the "
                                  "max_tokens it is sent with",
                        f"lower {flags.max_tokens}, or give other prompts ({flags.prompts})")]
    how = "counted by its /tokenize" if seen.counted else "estimated from below, without /tokenize"
    named = ", ".join(f"{f.prompt.id} ({f.tokens} + {f.max_tokens} tokens)" for f in found[:5])
    more = f" and {len(found) - 5} more" if len(found) > 5 else ""
    chars = min(f.prompt.chars for f in found) - 1
    return [Problem(arm.name, f"{len(found)} of {len(prompts)} prompts cannot fit the model's context of "
                              f"{length} with the max_tokens they are sent with ({how}): {named}{more}; the "
                              "runs leave them out, as Locust does",
                    f"{flags.max_prompt_chars} {chars} leaves them out of the prompt sets (the same on both "
                    "arms, whatever their contexts)", fatal=False)]


def _window(seen: Observed, url: str) -> counters.SpecWindow | None:
    if seen.metrics_before is None or seen.metrics_after is None:
        return None
    snaps = [Snapshot(float(i), url, tuple(p.samples)) for i, p in enumerate((seen.metrics_before,
                                                                               seen.metrics_after))]
    return counters.spec_window(snaps, 0.0, 1.0)


def _judge_metrics(arm: Arm, seen: Observed) -> list[Problem]:
    url = arm.scraped_url
    if arm.metrics_url is None and seen.models is None:
        return []  # URL/metrics of a server that did not answer: one problem, said once
    if url is None:
        if arm.speculates:
            return [Problem(arm.name, "its /metrics is not scraped (off): no acceptance, every level will be "
                                      "inconclusive", f"pass {arm.metrics_flag} URL of its /metrics",
                            fatal=False)]
        return []
    shown = display_url(url)
    if seen.metrics_error is not None:
        locked = "HTTP 401" in seen.metrics_error or "HTTP 403" in seen.metrics_error
        fix = (f"set {TOKEN_ENV} to its bearer token" if locked
               else f"pass {arm.metrics_flag} URL of that server's /metrics"
               + ("" if arm.speculates else f", or {arm.metrics_flag} off"))
        return [Problem(arm.name, f"cannot read {shown} ({seen.metrics_error})", fix)]
    window = _window(seen, url)
    if window is None or not seen.metrics_after.samples:  # type: ignore[union-attr]
        return [Problem(arm.name, f"{shown} is not Prometheus text",
                        f"pass {arm.metrics_flag} URL of its /metrics")]
    if arm.speculates and window.server_kind == "unknown":
        return [Problem(arm.name, f"{shown} has no speculative-decoding counters (it is the metrics of a "
                                  "server without speculation)",
                        f"point {arm.metrics_flag} at the candidate's own /metrics, or start the candidate "
                        "with speculation (vLLM --speculative-config)")]
    if not arm.speculates and (window.drafts or window.draft_tokens):
        return [Problem(arm.name, f"the draft counters at {shown} moved during the check: that server "
                                  "speculates",
                        f"point {arm.metrics_flag} at the baseline's own /metrics, or start the baseline "
                        "without --speculative-config")]
    return []


def _judge_pair(arms: Sequence[Arm], seen: Sequence[Observed], model: str, flags: Flags) -> list[Problem]:
    out = []
    urls = [display_url(a.url).rstrip("/") for a in arms]
    if len(set(urls)) < len(urls):
        out.append(Problem("both", f"the arms are the same server ({urls[0]})",
                           f"give {' and '.join(a.url_flag for a in arms)} different servers"))
    scraped = [a.scraped_url for a in arms if a.scraped_url]
    if len(set(scraped)) < len(scraped):
        out.append(Problem("both", f"both arms scrape {display_url(scraped[0])}",
                           "give each arm its own server's /metrics "
                           f"({' and '.join(a.metrics_flag for a in arms)})"))
    served = [s.model for s in seen if s.model is not None]
    if not model and len(set(served)) > 1:
        both = set.intersection(*(set(s.models or ()) for s in seen))
        named = ", ".join(f"{a.name} {s.model}" for a, s in zip(arms, seen, strict=True) if s.model)
        out.append(Problem("both", f"the arms serve different models ({named})",
                           f"pass {flags.model} {sorted(both)[0]}" if both
                           else "serve the same model on both arms"))
    return out


def _judge_swapped(arms: Sequence[Arm], seen: Sequence[Observed]) -> list[Problem]:
    """The baseline drafts and the candidate does not: one line asking the likely question, instead of one
    fix per arm that each point at a /metrics URL (the two checks each saw half of it)."""
    roles = {a.speculates: (a, s) for a, s in zip(arms, seen, strict=True)}
    if len(arms) != 2 or set(roles) != {False, True}:
        return []
    (base, base_seen), (cand, cand_seen) = roles[False], roles[True]
    if base.scraped_url is None or cand.scraped_url is None:
        return []
    base_window, cand_window = _window(base_seen, base.scraped_url), _window(cand_seen, cand.scraped_url)
    if base_window is None or cand_window is None:
        return []
    base_drafts = bool(base_window.drafts or base_window.draft_tokens)
    cand_drafts = bool(cand_window.drafts or cand_window.draft_tokens)
    if not base_drafts or cand_drafts:
        return []
    return [Problem("both", f"the baseline ({display_url(base.url)}) drafted during the check and the "
                            f"candidate ({display_url(cand.url)}) did not",
                    f"did you swap {base.url_flag} and {cand.url_flag}? the server with --speculative-config "
                    f"is the candidate")]


def judge(arms: Sequence[Arm], seen: Sequence[Observed], model: str, prompts: Sequence[Prompt],
          max_tokens: int | None, flags: Flags = SPEC_AB) -> list[Problem]:
    """Every problem the observations show, in the order a user would fix them."""
    out = _judge_pair(arms, seen, model, flags)
    swapped = _judge_swapped(arms, seen)
    out += swapped
    for arm, s in zip(arms, seen, strict=True):
        out += _judge_models(arm, s, model, flags)
        out += _judge_context(arm, s, prompts, max_tokens, flags)
        out += _judge_fit(arm, s, prompts, flags)
        out += _judge_probes(arm, s, flags)
        out += [] if swapped else _judge_metrics(arm, s)
    return out


# ---- the thin shell: HTTP calls, each bounded by a timeout ----

def _read_models(url: str, credentials: Credentials) -> tuple[tuple[str, ...] | None, int | None, str | None]:
    try:
        payload = server_api.get_json(url, "/models", credentials.api_key, CALL_TIMEOUT_S)
        data = payload["data"]
        models = tuple(str(m["id"]) for m in data)
        lengths = [m.get("max_model_len") for m in data if isinstance(m, dict)]
        length = next((int(v) for v in lengths if isinstance(v, int) and v > 0), None)
        return models, length, None
    except server_api.CallError as e:
        return None, None, str(e)
    except (KeyError, TypeError, ValueError, AttributeError):
        return None, None, "not an OpenAI model list"


def stream_probe(url: str, prompt: Prompt, model: str, max_tokens: int, api_key: str,
                 timeout: float = PROBE_TIMEOUT_S, tokens: int = PROBE_TOKENS) -> Probe:
    """Stream one chat completion, count token-carrying chunks up to `tokens`, then close it."""
    body = orjson.dumps({"model": model, "messages": list(prompt.messages), "max_tokens": max_tokens,
                         "temperature": 0, "stream": True})
    request = server_api.request(server_api.api_url(url, "/chat/completions"), api_key, body)
    seen = 0
    deadline = time.monotonic() + timeout
    try:
        with server_api.NO_REDIRECTS.open(request, timeout=timeout) as response:
            while seen < tokens and time.monotonic() < deadline:
                line = response.readline(MAX_LINE_BYTES)
                if not line:
                    break
                if not line.startswith(b"data:"):
                    continue
                event = sse.parse_payload(line[5:].strip())
                if isinstance(event, sse.Done):
                    break
                if isinstance(event, sse.Chunk) and event.error:
                    return Probe(prompt.id, seen, f"the stream carried an error: {event.error}")
                if isinstance(event, sse.Chunk) and event.has_choices and (
                        (event.completion_tokens or 0) > 0 or event.text_chars):
                    seen += 1
    except OSError as e:
        return Probe(prompt.id, seen, server_api.error_text(e), server_api.status_of(e))
    return Probe(prompt.id, seen, None)


def _scrape(fetch, url: str) -> tuple[Parsed | None, str | None]:
    try:
        return counters.parse_exposition_checked(fetch(url)), None
    except OSError as e:
        return None, server_api.error_text(e)
    except ValueError as e:  # the fetcher's own one line; its option hint is the plugin's, not ours
        return None, str(e).split(" (is ")[0]


def observe(arm: Arm, model: str, prompts: Sequence[Prompt], max_tokens: int | None,
            credentials: Credentials) -> Observed:
    """One arm's facts: /metrics, /v1/models, the probes, /metrics again (did the draft counters move?)."""
    models, length, models_error = _read_models(arm.url, credentials)
    # URL/metrics of a server that did not answer is not asked again: a black hole costs one timeout.
    url = arm.scraped_url if models is not None or arm.metrics_url is not None else None
    fetch = http_fetcher(credentials.metrics_token, CALL_TIMEOUT_S)
    before, error = _scrape(fetch, url) if url else (None, None)
    chosen = model or (models[0] if models else None)
    probes: tuple[Probe, ...] = ()
    left_out: tuple[context.TooLong, ...] = ()
    count = None
    if models and chosen in models:
        count = context.server_counter(arm.url, credentials.api_key, chosen, CALL_TIMEOUT_S)
        left_out = unfit(prompts, length, max_tokens, count)
        gone = {id(f.prompt) for f in left_out}
        sent = [p for p in prompts if id(p) not in gone]
        probes = tuple(stream_probe(arm.url, p, chosen, max_tokens_of(p, max_tokens), credentials.api_key)
                       for p in riskiest(sent, max_tokens, count=count, max_model_len=length))
    after = None
    if url and error is None:
        after, error = _scrape(fetch, url)
    return Observed(models, models_error, length, chosen if models else None, probes, before, after, error,
                    left_out, count is not None)


def unfit(prompts: Sequence[Prompt], max_model_len: int | None, max_tokens: int | None,
          count: Callable[[Prompt], int] | None) -> tuple[context.TooLong, ...]:
    """The prompts a run leaves out at this context (wiring/run.py asks the same, with the same counter:
    the server's /tokenize, else a lower bound), each with the max_tokens it would be sent with."""
    if max_model_len is None:
        return ()
    try:
        return tuple(context.too_long(prompts, max_model_len,
                                      lambda own: effective_max_tokens(own, max_tokens),
                                      count or context.lower_bound))
    except (OSError, ValueError):
        return ()  # a run that cannot count sends every prompt: so do the probes


def check(arms: Sequence[Arm], model: str, prompts: Sequence[Prompt], max_tokens: int | None,
          credentials: Credentials, flags: Flags = SPEC_AB) -> list[Problem]:
    """Observe every arm at once and judge; an empty list means the sweep may start."""
    # Daemon threads: Ctrl-C must not wait for a probe still reading a slow server (its timeout ends it).
    seen: list[Observed | BaseException | None] = [None] * len(arms)

    def work(i: int) -> None:
        try:
            seen[i] = observe(arms[i], model, prompts, max_tokens, credentials)
        except BaseException as e:  # re-raised below, in the caller's thread
            seen[i] = e

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(len(arms))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for result in seen:
        if isinstance(result, BaseException):
            raise result
    return judge(arms, seen, model, prompts, max_tokens, flags)  # type: ignore[arg-type]
