"""Metrics URLs: what is scraped, what may be shown, and credentials carried in the URL."""

from __future__ import annotations

import base64

import gevent
import pytest

from locust_spec.client.http_fetch import UrlError, check_urls, display_url, parse_target
from locust_spec.recording.scraper import Scraper, StatusError, default_metrics_url, metrics_urls


def test_credentials_in_the_url_become_a_basic_authorization_header_and_leave_the_url():
    target = parse_target("http://scraper:s%40cret@10.0.0.1:8000/metrics?x=1")
    assert (target.host, target.port, target.path) == ("10.0.0.1", 8000, "/metrics?x=1")
    assert base64.b64decode(target.basic.removeprefix("Basic ")) == b"scraper:s@cret"


def test_a_url_without_credentials_is_used_as_it_is():
    target = parse_target("http://127.0.0.1:8000/metrics")
    assert (target.scheme, target.host, target.port, target.path, target.basic) == (
        "http", "127.0.0.1", 8000, "/metrics", None)
    assert parse_target("https://[::1]/metrics").origin == ("https", "::1", 443)


def test_shown_urls_carry_no_credentials_and_no_query():
    assert display_url("http://u:p@host:9/metrics?token=t") == "http://host:9/metrics"


@pytest.mark.parametrize("password", ["Sekr/Et9", "Sekr#Et9", "Sekr?Et9", "1234/5678", "4321?Qz7"])
def test_a_password_with_an_unencoded_delimiter_is_one_line_without_the_secret(password):
    url = f"http://scraper:{password}@10.0.0.1:9090/metrics"
    with pytest.raises(UrlError) as caught:
        check_urls(["http://10.0.0.1:9090/metrics", url])
    message = str(caught.value)
    assert message.startswith("--metrics-url #2 of 2: ") and "%2F %3F %23 %40" in message
    assert "\n" not in message
    for part in password.replace("/", " ").replace("#", " ").replace("?", " ").replace("@", " ").split():
        assert part not in message


def test_an_unencoded_at_sign_in_the_password_is_read_as_meant():
    target = parse_target("http://scraper:Sekr@Et9@10.0.0.1:9090/metrics")
    assert (target.host, target.port) == ("10.0.0.1", 9090)
    assert base64.b64decode(target.basic.removeprefix("Basic ")) == b"scraper:Sekr@Et9"


def test_other_unusable_urls_are_named_and_usable_ones_pass():
    for bad in ("ftp://host/metrics", "http:///metrics", "host:9090/metrics"):
        with pytest.raises(UrlError):
            parse_target(bad)
    check_urls(["http://u:p%2Fq@host:9/metrics?t=1", "https://host/metrics"])


def test_the_default_is_the_servers_root_metrics_even_for_a_v1_base_url():
    assert default_metrics_url("http://h:8000/v1/") == "http://h:8000/metrics"
    assert metrics_urls(None, "http://h:8000") == ["http://h:8000/metrics"]
    assert metrics_urls(["off"], "http://h:8000") == []
    assert metrics_urls(["http://a/metrics", "http://a/metrics", "http://b/metrics"], None) == [
        "http://a/metrics", "http://b/metrics"]


def _scraper_answering(statuses: list[int]) -> tuple[Scraper, list[str], list[str]]:
    """A scraper whose URL answers each status in turn (then the last again); the lines it stopped on."""
    answers, asked, stopped = list(statuses), [], []

    def fetch(url: str) -> str:
        asked.append(url)
        status = answers.pop(0) if len(answers) > 1 else answers[0]
        raise StatusError(f"HTTP {status}", status)

    scraper = Scraper(["http://127.0.0.1:9/metrics"], 0.01, fetch)
    scraper.on_refused = stopped.append
    return scraper, asked, stopped


@pytest.mark.parametrize("status", [404, 401, 410])
def test_a_first_answer_that_will_never_change_stops_the_run_once(status):
    scraper, asked, stopped = _scraper_answering([status])
    scraper.start()
    gevent.sleep(0.1)
    scraper.stop()
    assert len(asked) == 1, "nothing is scraped after the refusal, at stop neither"
    assert stopped == [f"the metrics URL http://127.0.0.1:9/metrics answers HTTP {status}: no server "
                       "counters, so no acceptance; pass --metrics-url with the server's /metrics, or "
                       "--metrics-url off"]
    assert not any("failed" in line for line in scraper.warnings()), "nor a scrape warning"


@pytest.mark.parametrize("first", [429, 503, 408])
def test_a_busy_or_failing_server_at_start_and_a_404_later_are_gaps_not_a_stop(first):
    scraper, asked, stopped = _scraper_answering([first, 404])
    scraper.start()
    gevent.sleep(0.1)
    scraper.stop()
    assert stopped == [] and len(asked) > 2
    assert scraper.warnings()[0].startswith(
        f"metrics scrape of http://127.0.0.1:9/metrics failed {len(asked)} time(s), first: HTTP {first}")
