"""What tests/unit/test_docs.py reads: the commands and options that README.md and docs/*.md name, the real
parsers of the tools they belong to, and the plugin's options table in docs/options.md, generated from the
parser Locust builds with the plugin.

Conventions the docs keep so that this can check them: a fenced block of shell commands is tagged `sh`, one
of printed output `text` (every fence carries a tag). `python -m tests.docs_check` rewrites the options table.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import io
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OPTIONS_PAGE = ROOT / "docs" / "options.md"
TABLE_START = "<!-- options table: generated from the parser by `python -m tests.docs_check`; do not edit -->"
TABLE_END = "<!-- end of the options table -->"

FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.M | re.S)
OPTION = re.compile(r"(?<![\w./-])--[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
LINK = re.compile(r"\]\(([^)#:\s]+\.md(?:#[^)]*)?)\)")
SHELL_OPERATORS = {"&&", "||", "|", ";", "&"}
REDIRECTS = {">", ">>", "<", "2>", "2>>"}

# Options of other programs that the docs name in prose, each with its program: not ours to check.
EXTERNAL_OPTIONS = {
    "vllm serve": {"--speculative-config", "--per-request-spec-decode-metrics", "--max-model-len",
                   "--max-num-seqs", "--port", "--served-model-name", "--distributed-executor-backend",
                   "--gpu-memory-utilization"},
    "vllm bench serve": {"--backend", "--request-rate", "--timed-trace-sec-multiplier"},
    "aiperf": {"--fixed-schedule-speedup"},
    "sglang bench_serving": {"--mooncake-slowdown-factor"},
    "pytest": {"--basetemp", "--durations"},
    "docker compose run": {"--rm"},
}


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@dataclass(frozen=True)
class Fence:
    path: Path
    line: int
    lang: str
    body: str


def fences(path: Path, text: str) -> list[Fence]:
    return [Fence(path, text.count("\n", 0, m.start()) + 1, m.group(1).strip(), m.group(2))
            for m in FENCE.finditer(text)]


def prose(text: str) -> str:
    """The text outside `sh` fences (prose, tables, printed output): where options are named, not run."""
    return FENCE.sub(lambda m: "" if m.group(1).strip() == "sh" else m.group(2), text)


def commands(body: str) -> list[list[str]]:
    """The simple commands of a shell block: continuation lines joined, comments dropped, split at `&&`, `|`,
    `;`; leading VAR=value assignments and redirections left out."""
    out: list[list[str]] = []
    for line in lines_of(body):
        out += _simple_commands(line)
    return [c for c in out if c]


def _simple_commands(line: str) -> list[list[str]]:
    # a command substitution is one word to the command around it
    lexer = shlex.shlex(re.sub(r"\$\([^()]*\)", "SUBSTITUTED", line), posix=True, punctuation_chars=";&|<>")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    out: list[list[str]] = []
    current: list[str] = []
    skip_next = False
    for token in lexer:
        if skip_next:
            skip_next = False
        elif token in SHELL_OPERATORS:
            out.append(current)
            current = []
        elif token in REDIRECTS:
            skip_next = True
        elif not current and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", token):
            continue
        else:
            current.append(token)
    out.append(current)
    return out


def workflow_scripts(body: str) -> list[str]:
    """The `run:` scripts of a GitHub Actions workflow shown in a `yaml` fence (a mapping with `jobs`), in
    order: the docs' CI job is checked as its `sh` blocks are. Other YAML gives none."""
    import yaml

    doc = yaml.safe_load(body)
    jobs = doc.get("jobs") if isinstance(doc, dict) else None
    if not isinstance(jobs, dict):
        return []
    return [step["run"] for job in jobs.values() for step in (job or {}).get("steps", [])
            if isinstance(step, dict) and isinstance(step.get("run"), str)]


def lines_of(body: str) -> list[str]:
    """A shell block's logical lines (continuations joined), for messages."""
    return [line for line in body.replace("\\\n", " ").splitlines() if line.strip()]


# --- the tools' parsers ---------------------------------------------------------------------------------


def _quiet(call) -> str | None:
    """Run an argparse parse; its usage error (SystemExit) as one line, else None."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            call()
    except SystemExit as e:
        if e.code not in (0, None):
            return (err.getvalue().strip().splitlines() or [str(e.code)])[-1]
    return None


def locust_parser():
    """Locust's own parser with every option the plugin adds (the ladder's too: sweep.py imports it)."""
    from locust.argument_parser import get_parser

    import locust_spec  # noqa: F401  (registers the plugin's options)
    import locust_spec.wiring.shape  # noqa: F401  (the ladder's options, as sweep.py registers them)

    return get_parser(default_config_files=())


def plugin_parser():
    """A parser holding only the plugin's options, built by the plugin's own listeners, with the module
    of the listener that added each option."""
    from locust import events
    from locust.argument_parser import LocustArgumentParser

    import locust_spec  # noqa: F401
    import locust_spec.wiring.shape  # noqa: F401

    parser = LocustArgumentParser(add_help=False)
    origin: dict[str, str] = {}
    for handler in events.init_command_line_parser._handlers:
        before = len(parser._actions)
        handler(parser=parser)
        for action in parser._actions[before:]:
            for opt in action.option_strings:
                origin[opt] = handler.__module__
    return parser, origin


def _click_options(command) -> set[str]:
    names = {o for p in command.params for o in (*p.opts, *p.secondary_opts) if o.startswith("-")}
    return names | set(command.context_settings.get("help_option_names", ["--help"]))


def _click_check(command, name: str):
    import click

    def check(args: list[str]) -> str | None:
        try:
            command.make_context(name, list(args))
        except click.exceptions.Exit:
            return None
        except click.ClickException as e:
            return e.format_message()
        return None

    return check


@dataclass
class Tool:
    options: set[str]
    check: object  # (args) -> error line or None


def tools() -> dict[str, Tool]:
    """Every console script of [project.scripts], by name, with its options and a full parse of its args."""
    locust = locust_parser()  # first: Locust patches the standard library before the others import it
    from locust_spec.analysis.cli import cli as spec_verdict

    from locust_spec.ab.cli import main as spec_ab
    from locust_spec.ab.prime_cli import main as spec_prime
    from locust_spec.locustfile_cli import main as spec_locustfile
    from locust_spec.sim.cli import build_parser
    from locust_spec.tune.cli import main as spec_tune

    sim = build_parser()
    out = {
        "locust": Tool({o for a in locust._actions for o in a.option_strings},
                       lambda args: _quiet(lambda: locust.parse_args(args))),
        "spec-sim": Tool({o for a in sim._actions for o in a.option_strings},
                         lambda args: _quiet(lambda: sim.parse_args(args))),
    }
    for name, command in (("spec-ab", spec_ab), ("spec-tune", spec_tune), ("spec-prime", spec_prime),
                          ("spec-locustfile", spec_locustfile)):
        out[name] = Tool(_click_options(command), _click_check(command, name))

    def verdict(args: list[str]) -> str | None:
        if args[:1] in (["-h"], ["--help"]):
            return None
        sub, rest = (args[0], args[1:]) if args and args[0] in spec_verdict.commands else ("compare", args)
        return _click_check(spec_verdict.commands[sub], f"spec-verdict {sub}")(rest)

    out["spec-verdict"] = Tool(set().union(*(_click_options(c) for c in spec_verdict.commands.values())),
                               verdict)
    return out


def benchmark_options() -> dict[str, set[str]]:
    """benchmarks/NAME.py -> the options its argparse parser defines (read from the source, not run)."""
    out = {}
    for path in sorted((ROOT / "benchmarks").glob("*.py")):
        found = {"-h", "--help"}
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
                found |= {a.value for a in node.args
                          if isinstance(a, ast.Constant) and isinstance(a.value, str)}
        out[f"benchmarks/{path.name}"] = found
    return out


def make_targets() -> set[str]:
    return set(re.findall(r"^([a-z][\w-]*):", (ROOT / "Makefile").read_text(), re.M))


# --- the plugin's options table ------------------------------------------------------------------------

WHERE = {"locust_spec.plugin": "any", "locust_spec.wiring.shape": "`sweep.py` (the ladder)"}


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _default(action) -> str:
    # a credential's default comes from the environment: never print it
    if re.search(r"(^|_)(key|token)$", action.dest) or action.default is None or action.default is False \
            or action.default == "":
        return ""
    return f"`{action.default}`"


def options_table() -> str:
    parser, origin = plugin_parser()
    rows = ["| option | locustfile | default | web UI | what |", "|---|---|---|---|---|"]
    for action in parser._actions:
        if not action.option_strings:
            continue
        opt = action.option_strings[0]
        name = f"{opt} {'|'.join(action.choices)}" if action.choices else opt
        repeat = " (repeatable)" if isinstance(action, argparse._AppendAction) else ""
        web = "yes" if getattr(action, "include_in_web_ui", True) else "no"
        where, what = WHERE.get(origin[opt], origin[opt]), _cell(action.help or "")
        rows.append(f"| `{_cell(name)}`{repeat} | {where} | {_default(action)} | {web} | {what} |")
    return "\n".join(rows)


def table_in_page(text: str) -> str:
    start, end = text.index(TABLE_START) + len(TABLE_START), text.index(TABLE_END)
    return text[start:end].strip()


def write_table() -> None:
    text = OPTIONS_PAGE.read_text()
    start, end = text.index(TABLE_START) + len(TABLE_START), text.index(TABLE_END)
    OPTIONS_PAGE.write_text(text[:start] + "\n" + options_table() + "\n" + text[end:])


if __name__ == "__main__":
    write_table()
    sys.stdout.write(f"wrote the options table in {OPTIONS_PAGE.relative_to(ROOT)}\n")
