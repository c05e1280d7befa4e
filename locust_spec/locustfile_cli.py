"""spec-locustfile: print the path of a packaged locustfile, for `locust -f "$(spec-locustfile chat)"`."""

from __future__ import annotations

import click

from locust_spec.core.resources import locustfile, locustfiles_dir


@click.command(help="Print the path of a packaged locustfile (chat, sweep, multiturn), so that plain "
                    "Locust runs it from an installed wheel: locust -f \"$(spec-locustfile chat)\" ...")
@click.argument("name", default="chat")
@click.option("--list", "list_all", is_flag=True, help="List the packaged locustfiles and exit.")
def main(name: str, list_all: bool) -> None:
    if list_all:
        for path in sorted(locustfiles_dir().glob("*.py")):
            if path.stem != "__init__":
                click.echo(path.stem)
        return
    try:
        click.echo(locustfile(name))
    except FileNotFoundError as e:
        raise click.ClickException(str(e)) from None
