"""spec-verdict vocab: compare target and draft tokenizers (vocab sizes, special tokens, content hash)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import orjson

from .runs import InputError


@dataclass(frozen=True)
class TokenizerFacts:
    source: str
    config_vocab_size: int | None
    tokenizer_vocab_size: int | None
    special_tokens: dict[str, int]
    content_hash: str | None


def _load(path: Path) -> dict:
    try:
        data = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as exc:
        raise InputError(f"{path}: not valid JSON: {exc}") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror}") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: not a JSON object")
    return data


def _config_vocab(config: dict) -> int | None:
    for holder in (config, config.get("text_config") or {}):
        if isinstance(holder, dict) and isinstance(holder.get("vocab_size"), int):
            return holder["vocab_size"]
    return None


def facts_from(config: dict | None, tokenizer: dict | None, source: str) -> TokenizerFacts:
    """What matters for speculation from a config.json and/or tokenizer.json (pure)."""
    special: dict[str, int] = {}
    size = content = None
    if tokenizer is not None:
        vocab = (tokenizer.get("model") or {}).get("vocab")
        added = [t for t in tokenizer.get("added_tokens") or [] if isinstance(t, dict)]
        ids = set(vocab.values()) if isinstance(vocab, dict) else set(range(len(vocab or [])))
        ids |= {t.get("id") for t in added}
        size = len(ids) if ids else None
        special = {str(t.get("content")): t.get("id") for t in added if t.get("special")}
        canonical = orjson.dumps({k: tokenizer.get(k) for k in ("model", "added_tokens", "normalizer",
                                                                "pre_tokenizer", "decoder")},
                                 option=orjson.OPT_SORT_KEYS)
        content = hashlib.sha256(canonical).hexdigest()[:16]
    if config is not None:
        for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
            if config.get(key) is not None:
                special.setdefault(f"<{key}>", config[key])
    return TokenizerFacts(source, _config_vocab(config or {}), size, special, content)


def read_facts(path: Path) -> TokenizerFacts:
    """A model folder, or one config.json / tokenizer.json."""
    if path.is_dir():
        config, tokenizer = path / "config.json", path / "tokenizer.json"
        if not config.is_file() and not tokenizer.is_file():
            raise InputError(f"{path}: neither config.json nor tokenizer.json in this folder")
        return facts_from(_load(config) if config.is_file() else None,
                          _load(tokenizer) if tokenizer.is_file() else None, str(path))
    if not path.is_file():
        raise InputError(f"{path}: no such file or folder")
    data = _load(path)
    if "model" in data and isinstance(data["model"], dict):
        return facts_from(None, data, str(path))
    return facts_from(data, None, str(path))


def compare(target: TokenizerFacts, draft: TokenizerFacts) -> list[str]:
    """The mismatches that make a draft's proposals rejected (pure); empty when compatible."""
    problems = []
    for label, a, b in (("config vocab_size", target.config_vocab_size, draft.config_vocab_size),
                        ("tokenizer vocabulary size", target.tokenizer_vocab_size,
                         draft.tokenizer_vocab_size)):
        if a is not None and b is not None and a != b:
            problems.append(f"{label} differs: target {a}, draft {b}")
    for name in sorted(set(target.special_tokens) & set(draft.special_tokens)):
        if target.special_tokens[name] != draft.special_tokens[name]:
            problems.append(f"special token {name} has id {target.special_tokens[name]} in the target, "
                            f"{draft.special_tokens[name]} in the draft")
    only = sorted(set(target.special_tokens) ^ set(draft.special_tokens))
    if only:
        problems.append(f"special tokens in only one of them: {', '.join(only[:10])}")
    if target.content_hash and draft.content_hash and target.content_hash != draft.content_hash:
        problems.append(f"tokenizer content differs (hash {target.content_hash} vs {draft.content_hash})")
    return problems


def report(target: TokenizerFacts, draft: TokenizerFacts, problems: list[str]) -> str:
    lines = []
    for role, f in (("target", target), ("draft", draft)):
        lines.append(f"{role}: {f.source}: config vocab_size {f.config_vocab_size}, tokenizer vocabulary "
                     f"{f.tokenizer_vocab_size}, {len(f.special_tokens)} special tokens, "
                     f"hash {f.content_hash}")
    if problems:
        lines.append("MISMATCH: the draft's proposals will be rejected where these differ:")
        lines.extend(f"  - {p}" for p in problems)
    else:
        lines.append("MATCH: vocabulary sizes, special tokens and tokenizer content agree")
    return "\n".join(lines) + "\n"
