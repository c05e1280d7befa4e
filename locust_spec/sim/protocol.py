"""Pure formatting of vLLM 0.32's OpenAI-compatible bodies: SSE chunks, full responses, errors, model list."""

from __future__ import annotations

from dataclasses import dataclass

import orjson

FINGERPRINT = "vllm-0.32.0-spec-sim"
DONE = b"data: [DONE]\n\n"


def _s(value: str | None) -> str:
    return orjson.dumps(value).decode()


class StreamFormat:
    """Chunks of one streamed chat completion, byte-compatible with vLLM (compact JSON, same key order)."""

    def __init__(self, rid: str, created: int, model: str, prompt_tokens: int, *, include_usage: bool,
                 continuous_usage: bool):
        self.prompt_tokens = prompt_tokens
        self.include_usage = include_usage
        self.continuous = include_usage and continuous_usage
        self._head = (f'data: {{"id":{_s(rid)},"object":"chat.completion.chunk","created":{created},'
                      f'"model":{_s(model)},')

    def _usage(self, completion: int) -> str:
        p = self.prompt_tokens
        return (f'"usage":{{"prompt_tokens":{p},"total_tokens":{p + completion},'
                f'"completion_tokens":{completion},"completion_tokens_details":null}}')

    def role(self) -> bytes:
        usage = self._usage(0) + "," if self.continuous else ""
        return (f'{self._head}"choices":[{{"index":0,"delta":{{"role":"assistant","content":""}},'
                f'"logprobs":null,"finish_reason":null}}],{usage}"prompt_token_ids":null,"prompt_text":null}}\n\n').encode()

    def token(self, text: str, completion: int, finish: str | None = None,
              stop_reason: str | None = None) -> bytes:
        if finish is None:
            tail = '"finish_reason":null,"token_ids":null}]'
        else:
            tail = f'"finish_reason":{_s(finish)},"stop_reason":{_s(stop_reason)},"token_ids":null}}]'
        usage = "," + self._usage(completion) if self.continuous else ""
        return (f'{self._head}"choices":[{{"index":0,"delta":{{"content":{_s(text)}}},"logprobs":null,'
                f"{tail}{usage}}}\n\n").encode()

    def usage(self, completion: int, spec_metrics: dict | None = None) -> bytes:
        p = self.prompt_tokens
        metrics = ""
        if spec_metrics:
            metrics = ',"metrics":' + orjson.dumps({"speculative_decoding": spec_metrics}).decode()
        return (f'{self._head}"choices":[],"usage":{{"prompt_tokens":{p},"total_tokens":{p + completion},'
                f'"completion_tokens":{completion}}},"system_fingerprint":"{FINGERPRINT}"{metrics}}}\n\n').encode()


def completion(rid: str, created: int, model: str, text: str, finish: str, stop_reason: str | None,
               prompt_tokens: int, completion_tokens: int, spec_metrics: dict | None) -> bytes:
    """A non-streamed chat completion in vLLM's shape; `metrics` only with per-request spec metrics."""
    body = {
        "id": rid, "object": "chat.completion", "created": created, "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text, "refusal": None,
                                             "annotations": None, "audio": None, "function_call": None,
                                             "reasoning": None},
                     "logprobs": None, "finish_reason": finish, "stop_reason": stop_reason, "token_ids": None,
                     "routed_experts": None}],
        "service_tier": None, "system_fingerprint": FINGERPRINT,
        "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + completion_tokens,
                  "completion_tokens": completion_tokens, "prompt_tokens_details": None,
                  "completion_tokens_details": None},
        "prompt_logprobs": None, "prompt_token_ids": None, "prompt_text": None, "kv_transfer_params": None,
        "ec_transfer_params": None,
    }
    if spec_metrics is not None:
        body["metrics"] = {"time_to_first_token_ms": None, "generation_time_ms": None,
                           "queue_time_ms": None, "mean_itl_ms": None, "tokens_per_second": None,
                           "speculative_decoding": spec_metrics}
    return orjson.dumps(body)


ERROR_TYPES = {400: "BadRequestError", 404: "NotFoundError", 429: "RateLimitError",
               500: "InternalServerError"}


def error(status: int, message: str) -> bytes:
    kind = ERROR_TYPES.get(status, "Error")
    return orjson.dumps({"error": {"message": message, "type": kind, "param": None, "code": status}})


def models(name: str, created: int, max_model_len: int) -> bytes:
    return orjson.dumps({"object": "list", "data": [{
        "id": name, "object": "model", "created": created, "owned_by": "vllm", "root": name, "parent": None,
        "max_model_len": max_model_len,
        "permission": [{"id": f"modelperm-{name}", "object": "model_permission", "created": created,
                        "allow_create_engine": False, "allow_sampling": True, "allow_logprobs": True,
                        "allow_search_indices": False, "allow_view": True, "allow_fine_tuning": False,
                        "organization": "*", "group": None, "is_blocking": False}]}]})


class BadRequest(Exception):
    """A request the server answers with an error status (400 or 404) and a one-line message."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class ChatParams:
    """The parts of a chat-completions body spec-sim honours."""

    messages: list[dict]
    stream: bool
    max_tokens: int | None
    temperature: float
    ignore_eos: bool
    stop: tuple[str, ...]
    response_format: bool
    include_usage: bool
    continuous_usage: bool
    seed: int | None


def parse_chat(body: object, served_model: str) -> ChatParams:
    """Validate a chat-completions body; raise BadRequest as vLLM would (404 for an unknown model)."""
    if not isinstance(body, dict):
        raise BadRequest(400, "request body must be a JSON object")
    model = body.get("model", served_model)
    if model != served_model:
        raise BadRequest(404, f"The model `{model}` does not exist.")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise BadRequest(400, "messages must be a non-empty list of message objects")
    for m in messages:
        content = m.get("content")
        parts_ok = isinstance(content, list) and all(
            isinstance(p, dict) and isinstance(p.get("text", ""), str) for p in content)
        if not isinstance(m.get("role", "user"), str) or not (content is None or isinstance(content, str)
                                                              or parts_ok):
            raise BadRequest(400, "each message needs a string role and content that is a string or a "
                                  "list of text parts")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is not None and (not isinstance(max_tokens, int) or isinstance(max_tokens, bool)
                                   or max_tokens < 1):
        raise BadRequest(400, f"max_tokens must be at least 1, got {max_tokens}.")
    temperature = body.get("temperature", 1.0)
    if temperature is None:
        temperature = 1.0
    if not isinstance(temperature, int | float) or temperature < 0:
        raise BadRequest(400, f"temperature must be non-negative, got {temperature}.")
    stop = body.get("stop") or ()
    if isinstance(stop, str):
        stop = (stop,)
    if not isinstance(stop, list | tuple) or not all(isinstance(s, str) and s for s in stop):
        raise BadRequest(400, "stop must be a string or a list of non-empty strings")
    rf = body.get("response_format")
    known = ("text", "json_object", "json_schema", "structural_tag")
    if rf is not None and (not isinstance(rf, dict) or rf.get("type") not in known):
        raise BadRequest(400, "response_format must be an object with a known type")
    opts = body.get("stream_options") or {}
    if not isinstance(opts, dict):
        raise BadRequest(400, "stream_options must be an object")
    seed = body.get("seed")
    return ChatParams(messages, bool(body.get("stream", False)), max_tokens, float(temperature),
                      bool(body.get("ignore_eos", False)), tuple(stop),
                      rf is not None and rf.get("type") != "text", bool(opts.get("include_usage", False)),
                      bool(opts.get("continuous_usage_stats", False)),
                      seed if isinstance(seed, int) else None)
