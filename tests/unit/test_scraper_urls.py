"""Metrics URLs: what is scraped, what may be shown, and credentials carried in the URL."""

from __future__ import annotations

import base64

from locust_spec.scraper import basic_auth, default_metrics_url, display_url, metrics_urls


def test_credentials_in_the_url_become_a_basic_authorization_header_and_leave_the_url():
    url, header = basic_auth("http://scraper:s%40cret@10.0.0.1:8000/metrics?x=1")
    assert url == "http://10.0.0.1:8000/metrics?x=1"
    assert base64.b64decode(header.removeprefix("Basic ")) == b"scraper:s@cret"


def test_a_url_without_credentials_is_used_as_it_is():
    assert basic_auth("http://127.0.0.1:8000/metrics") == ("http://127.0.0.1:8000/metrics", None)


def test_shown_urls_carry_no_credentials_and_no_query():
    assert display_url("http://u:p@host:9/metrics?token=t") == "http://host:9/metrics"


def test_the_default_is_the_servers_root_metrics_even_for_a_v1_base_url():
    assert default_metrics_url("http://h:8000/v1/") == "http://h:8000/metrics"
    assert metrics_urls(None, "http://h:8000") == ["http://h:8000/metrics"]
    assert metrics_urls(["off"], "http://h:8000") == []
    assert metrics_urls(["http://a/metrics", "http://a/metrics", "http://b/metrics"], None) == [
        "http://a/metrics", "http://b/metrics"]
