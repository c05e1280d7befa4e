"""A worker taking a spawn message (at start and at every level change) keeps the master's options that are
not Locust's own. Locust asks which those are once per option, and each answer built its whole argument
parser: 84 options with ours, 0.7-1.3 s of a blocked event loop per level change on every worker (a busy
2-core VM). With the plugin loaded the parser is built once and every answer is a copy of it."""

from __future__ import annotations

from locust import argument_parser

import locust_spec.plugin  # noqa: F401  (what any locustfile using locust-spec loads)


def test_a_spawn_messages_options_are_sorted_without_building_locusts_parser_per_option(monkeypatch):
    options = vars(argument_parser.get_parser().parse_args(["--prompts", "quote"]))
    assert "prompts" in options  # ours beside Locust's own
    built = []
    build = argument_parser.get_empty_argument_parser

    def counted(*args, **kwargs):
        built.append(1)
        return build(*args, **kwargs)

    monkeypatch.setattr(argument_parser, "get_empty_argument_parser", counted)

    # what locust/runners.py's WorkerRunner does with a spawn message's "parsed_options"
    kept = {k: v for k, v in options.items() if k not in argument_parser.default_args_dict()}

    assert len(built) <= 1, f"Locust's parser built {len(built)} times for {len(options)} options"
    assert kept["prompts"] == ["quote"] and "host" not in kept and "num_users" not in kept


def test_each_answer_is_a_copy_of_locusts_own_options():
    first = argument_parser.default_args_dict()
    first["host"] = "changed by a caller"
    first["not_an_option"] = 1
    again = argument_parser.default_args_dict()
    assert again["host"] is None and "not_an_option" not in again
