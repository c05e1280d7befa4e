"""Locust processes for the hostile tier: started against a hostile server, read back when done."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.support import BIN, CLIENT_CPU, REPO, pinned

CHAT = str(REPO / "locustfiles" / "chat.py")
PROMPTS = '{"id": "a", "class": "code", "prompt": "def f(x): return x"}\n'


def locust_cmd(tmp: Path, host: str, *extra: str) -> list[str]:
    prompts = tmp / "prompts.jsonl"
    prompts.write_text(PROMPTS)
    return pinned([str(BIN / "locust"), "-f", CHAT, "--host", host, "--csv", str(tmp / "run"),
                   "--prompts", str(prompts), "--max-tokens", "8", "--only-summary", *extra], CLIENT_CPU)


def start(tmp: Path, host: str, *extra: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen(locust_cmd(tmp, host, *extra), cwd=tmp, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env={**os.environ, **(env or {})})
