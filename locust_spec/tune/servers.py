"""The servers spec-tune measures, one per arm: embedded spec-sim, a command template it starts and stops
itself, or URLs already running."""

from __future__ import annotations

import contextlib
import json
import re
import shlex
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from locust_spec.ab import children, progress
from locust_spec.ab.children import ChildError

PORT, CONFIG = "{port}", "{speculative_config}"
CMD_READY_S = 600.0
"""A real server loads weights and may compile before /health answers."""


def parse_template(template: str) -> list[str]:
    """The template's words; ValueError when it lacks a placeholder spec-tune must fill."""
    words = shlex.split(template)
    for placeholder in (PORT, CONFIG):
        if not any(placeholder in w for w in words):
            raise ValueError(f"--server-cmd needs {placeholder} (e.g. 'vllm serve MODEL --port {{port}} "
                             f"--speculative-config {{speculative_config}}')")
    return words


def command_for(words: list[str], port: int, config: dict | None) -> list[str]:
    """Fill the template: the JSON config as one word, or with no speculation (None) the config word
    dropped, together with the long option right before it (`--speculative-config {speculative_config}`),
    and nothing else. A word with spaces around the placeholder is a shell command (`sh -c "... {port}
    ... --speculative-config {speculative_config}"`): the config goes in shell-quoted, and with none its
    option and placeholder are cut out of that command alone, the command and the words before it kept."""
    text = json.dumps(config, separators=(",", ":")) if config is not None else None
    out: list[str] = []
    for word in words:
        word = word.replace(PORT, str(port))
        if CONFIG in word and any(c.isspace() for c in word):
            word = _fill_shell(word, text)
        elif CONFIG in word:
            if text is None:
                if word == CONFIG and out and out[-1].startswith("--"):
                    out.pop()
                continue
            word = word.replace(CONFIG, text)
        out.append(word)
    return out


# In a shell command: the placeholder, bare or in quotes, with the long option right before it.
_SHELL_CONFIG = re.compile(r"(?P<lead>\s*)(?P<option>--[A-Za-z][\w.-]*(?:=|\s+))?(?P<q>['\"]?)"
                           + re.escape(CONFIG) + r"(?P=q)")


def _fill_shell(command: str, text: str | None) -> str:
    if text is None:
        return _SHELL_CONFIG.sub("", command).strip()
    return _SHELL_CONFIG.sub(lambda m: m["lead"] + (m["option"] or "") + shlex.quote(text), command)


def parse_server(text: str) -> tuple[str, str]:
    """`K=URL` (or `schedule=URL`) -> (arm, url)."""
    arm, sep, url = text.partition("=")
    arm = arm.strip()
    if not sep or not url.strip() or not (arm.isdigit() or arm == "schedule"):
        raise ValueError(f"--server wants K=URL or schedule=URL, got {text!r}")
    return (f"k{int(arm)}" if arm.isdigit() else arm), url.strip()


@dataclass(frozen=True)
class SimSettings:
    time_scale: float
    gpu: str
    extra: tuple[str, ...] = ()


@dataclass
class Servers:
    """Starts one server per arm on demand and stops every one it started (by pid) on close."""

    out: Path
    sim: SimSettings | None = None
    template: list[str] | None = None
    urls: dict[str, str] = field(default_factory=dict)
    display: progress.Display | None = None
    """Where a server that is slow to start (a real one loads weights for minutes) or to stop is said to be
    starting or stopping, a line every few seconds."""
    record: Callable[[Path], object] = Path
    """Called with each file's path before it is written (spec-tune: its record of what it wrote)."""
    _procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    @property
    def starts_servers(self) -> bool:
        return self.sim is not None or self.template is not None

    def start(self, arm: str, config: dict | None) -> str:
        """The arm's URL: given, or a server started now with `config` (None: no speculation)."""
        if arm in self.urls:
            return self.urls[arm]
        if not self.starts_servers:
            raise ChildError(f"no server for {arm}: give --server {arm.removeprefix('k')}=URL")
        log, settings = self.out / "servers" / f"{arm}.log", self.out / "servers" / f"{arm}.json"
        for path in (log, settings):
            self.record(path)
        log.parent.mkdir(parents=True, exist_ok=True)
        settings.write_text(json.dumps({"speculative_config": config}) + "\n")
        with self._saying(lambda t: f"spec-tune: waiting for server {arm} to answer ({t:.0f}s; log: {log})"):
            proc, url = self._launch(log, config, arm)
        self._procs[arm] = proc
        self.urls[arm] = url
        return url

    def _launch(self, log: Path, config: dict | None, arm: str) -> tuple[subprocess.Popen, str]:
        if self.sim is not None:
            return children.start_sim(log, self.sim.time_scale, self.sim.gpu, config, self.sim.extra)
        port = children.free_port()
        cmd = command_for(self.template, port, config)
        proc = children.spawn(cmd, log)
        url = f"http://127.0.0.1:{port}"
        try:
            children.wait_ready(url, proc, log, timeout=CMD_READY_S, name=f"server {arm} ({cmd[0]})")
        except BaseException:
            children.stop(proc, group=True)
            raise
        return proc, url

    def _saying(self, status):
        return progress.phase(self.display, status) if self.display is not None else contextlib.nullcontext()

    def stop(self, arm: str) -> None:
        proc = self._procs.pop(arm, None)
        if proc is None:
            return
        with self._saying(lambda t: f"spec-tune: stopping server {arm} ({t:.0f}s)"):
            children.stop(proc, timeout=60.0, group=True)
        self.urls.pop(arm, None)

    def close(self) -> None:
        for arm in list(self._procs):
            self.stop(arm)
