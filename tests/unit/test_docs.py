"""README.md and docs/*.md say only what the code does: every command they show parses with the real parser
of its tool (the cheap ones without a server run), every option they name exists, and the plugin's options
table is the parser's (tests/docs_check.py)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests import docs_check as dc

README = dc.ROOT / "README.md"
README_LIMIT = 200
# Commands that need no server and take a second: run as written (from the checkout, the console scripts of
# this virtualenv).
RUN_AS_WRITTEN = {"spec-locustfile"}


@pytest.fixture(scope="module")
def tools() -> dict[str, dc.Tool]:
    return dc.tools()


@pytest.fixture(scope="module")
def benchmarks() -> dict[str, set[str]]:
    return dc.benchmark_options()


def _tool_of(command: list[str]) -> str:
    """The program a command runs: a console script's name whatever its folder (.venv/bin/spec-ab), a
    benchmark script by its path, else the word itself."""
    if Path(command[0]).name.startswith("python") and command[1:2] and command[1].startswith("benchmarks/"):
        return command[1]
    return Path(command[0]).name


def _args(command: list[str]) -> list[str]:
    return command[2:] if command[1:2] and command[1].startswith("benchmarks/") else command[1:]


def check_fences(path: Path, text: str, tools: dict, benchmarks: dict, targets: set[str]) -> list[str]:
    """Shell commands of a page's fences that their tool would refuse: every command of an `sh` fence, of
    each `run:` step of a GitHub Actions workflow in a `yaml` fence, and in an untagged fence (older pages)
    the lines that run one of ours."""
    problems = []
    for fence in dc.fences(path, text):
        where = f"{path.name}:{fence.line}"
        if fence.lang == "yaml":
            try:
                scripts = dc.workflow_scripts(fence.body)
            except yaml.YAMLError as e:
                problems.append(f"{where}: not YAML: {' '.join(str(e).split())}")
                continue
            bodies = [("sh", script) for script in scripts]
        elif fence.lang in ("sh", ""):
            bodies = [(fence.lang, fence.body)]
        else:
            continue
        for lang, body in bodies:
            problems += _check_commands(where, lang, body, tools, benchmarks, targets)
    return problems


def _check_commands(where: str, lang: str, body: str, tools: dict, benchmarks: dict,
                    targets: set[str]) -> list[str]:
    problems = []
    try:
        shell = dc.commands(body)
    except ValueError as e:  # unbalanced quotes: no shell would run it either
        return [f"{where}: {e}"] if lang else []
    for command in shell:
        tool = _tool_of(command)
        if tool in tools:
            error = tools[tool].check(_args(command))
            if error:
                problems.append(f"{where}: {' '.join(command)}: {error}")
        elif tool in benchmarks:
            unknown = {o.split("=")[0] for o in _args(command) if o.startswith("-")} - benchmarks[tool]
            if unknown:
                problems.append(f"{where}: {tool} has no {sorted(unknown)}")
        elif tool == "make":
            missing = [t for t in _args(command) if "=" not in t and t not in targets]
            if missing:
                problems.append(f"{where}: the Makefile has no target {missing}")
    return problems


def check_prose(path: Path, text: str, known: set[str]) -> list[str]:
    """Options named outside shell blocks (prose, tables, printed output) that no tool defines."""
    return [f"{path.name}: {opt} is an option of none of the tools" for opt in
            sorted(set(dc.OPTION.findall(dc.prose(text))) - known)]


def _known(tools: dict, benchmarks: dict) -> set[str]:
    return (set().union(*(t.options for t in tools.values()), *benchmarks.values(),
                        *dc.EXTERNAL_OPTIONS.values()))


def test_readme_is_a_page_a_newcomer_can_skim():
    assert len(README.read_text().splitlines()) < README_LIMIT


def test_readme_keeps_the_two_commands_ci_runs():
    text = README.read_text()
    shell = [c for f in dc.fences(README, text) if f.lang == "sh" for c in dc.commands(f.body)]
    assert ["make", "ab"] in shell and ["make", "test"] in shell


def test_every_fenced_command_parses_with_its_tools_parser(tools, benchmarks):
    targets = dc.make_targets()
    problems = [p for path in dc.doc_files()
                for p in check_fences(path, path.read_text(), tools, benchmarks, targets)]
    assert not problems, "\n".join(problems)


def test_every_option_the_docs_name_exists(tools, benchmarks):
    known = _known(tools, benchmarks)
    problems = [p for path in dc.doc_files() for p in check_prose(path, path.read_text(), known)]
    assert not problems, "\n".join(problems)


def test_the_options_table_is_the_plugins_parser():
    """Every option the plugin adds to Locust is in docs/options.md's table, as the parser defines it."""
    assert dc.table_in_page(dc.OPTIONS_PAGE.read_text()) == dc.options_table(), \
        "docs/options.md is stale: run `python -m tests.docs_check`"
    parser, _ = dc.plugin_parser()
    table = dc.table_in_page(dc.OPTIONS_PAGE.read_text())
    assert all(f"`{a.option_strings[0]}" in table for a in parser._actions if a.option_strings)


def test_cheap_readme_commands_run_as_written():
    text = README.read_text()
    ran = 0
    for fence in dc.fences(README, text):
        for command in dc.commands(fence.body) if fence.lang == "sh" else []:
            if _tool_of(command) in RUN_AS_WRITTEN:
                exe = shutil.which(Path(command[0]).name, path=str(Path(sys.executable).parent))
                done = subprocess.run([exe, *command[1:]], capture_output=True, text=True, timeout=60,
                                      cwd=dc.ROOT)
                assert done.returncode == 0, f"{' '.join(command)}: {done.stderr}"
                assert done.stdout.strip()
                ran += 1
    assert ran, "the README shows no command that runs without a server"


# The checker itself: it must find what is wrong, not only pass what is right.

def test_the_checker_refuses_an_option_its_tool_lacks(tools, benchmarks):
    page = ("```sh\nspec-ab --out runs/x --no-such-option 3\nlocust -f chat.py --levels 1,4 --rate 2\n"
            ".venv/bin/spec-verdict runs/a runs/b --fail-on off\nmake ab\nmake deploy\n```\n")
    problems = check_fences(Path("page.md"), page, tools, benchmarks, dc.make_targets())
    assert len(problems) == 2
    assert "--no-such-option" in problems[0] and "deploy" in problems[1]


def test_the_checker_reads_values_as_the_parser_does(tools, benchmarks):
    page = "```sh\nlocust -f chat.py --levels one,two\nspec-sim --port 8000 --gpu Z80\n```\n"
    assert len(check_fences(Path("page.md"), page, tools, benchmarks, set())) == 2


def test_the_checker_reads_our_commands_in_untagged_fences_and_options_in_prose(tools, benchmarks):
    page = ("Use `--rate` and `--frobnicate`.\n```\nspec-ab --out x --levles 1\n{\"a\": \"it's\"}\n```\n"
            "```text\n--stage-time 5s\n```\n```json\n{\"spec-sim --no\": 1}\n```\n")
    assert check_fences(Path("p.md"), page, tools, benchmarks, set()) == [
        "p.md:2: spec-ab --out x --levles 1: No such option '--levles'. Did you mean '--levels'?"]
    assert check_prose(Path("p.md"), page, _known(tools, benchmarks)) == [
        f"p.md: {opt} is an option of none of the tools" for opt in ("--frobnicate", "--levles", "--no")]


def test_the_checker_reads_a_workflows_run_steps_as_shell(tools, benchmarks):
    page = ("```yaml\njobs:\n  gate:\n    steps:\n      - uses: actions/checkout@v4\n"
            "      - run: |\n          spec-ab --out runs/ci --levles 1\n"
            "      - run: spec-verdict runs/ci --fail-on off >> \"$GITHUB_STEP_SUMMARY\"\n```\n"
            "```yaml\nname: [unclosed\n```\n")
    problems = check_fences(Path("p.md"), page, tools, benchmarks, set())
    assert len(problems) == 2
    assert "--levles" in problems[0] and problems[1].startswith("p.md:10: not YAML")


def test_the_docs_show_a_complete_ci_workflow_that_gates_on_the_verdict():
    text = (dc.ROOT / "docs" / "ci.md").read_text()
    scripts = [s for f in dc.fences(dc.ROOT / "docs" / "ci.md", text) if f.lang == "yaml"
               for s in dc.workflow_scripts(f.body)]
    shell = [c for script in scripts for c in dc.commands(script)]
    tools_run = [_tool_of(c) for c in shell]
    assert "spec-ab" in tools_run and "spec-verdict" in tools_run
    gate = next(c for c in shell if _tool_of(c) == "spec-verdict")
    assert "--fail-on" in gate


def test_commands_are_split_as_a_shell_would():
    body = ("mkdir -p runs && HOST_UID=$(id -u) \\\n  docker compose -f x.yaml run --rm ab  # note\n"
            "spec-verdict a b --format markdown >> \"$GITHUB_STEP_SUMMARY\"\n")
    assert dc.commands(body) == [["mkdir", "-p", "runs"],
                                 ["docker", "compose", "-f", "x.yaml", "run", "--rm", "ab"],
                                 ["spec-verdict", "a", "b", "--format", "markdown"]]


def test_every_page_the_docs_link_exists():
    missing = []
    for path in dc.doc_files():
        for target in dc.LINK.findall(path.read_text()):
            page = (path.parent / target.split("#")[0]).resolve()
            if not page.exists():
                missing.append(f"{path.name}: {target}")
    assert not missing, "\n".join(missing)
