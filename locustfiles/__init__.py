"""The packaged locustfiles: `locust -f "$(spec-locustfile chat)"` runs one from an installed wheel."""
