"""A plain-GET load for scraper tests: the scraper must not depend on what the users send."""

from locust import HttpUser, constant, task

import locust_spec.recording.scraper  # noqa: F401  (registers the --metrics-* options and listeners)


class GetUser(HttpUser):
    wait_time = constant(0.05)

    @task
    def get(self) -> None:
        self.client.get("/")
