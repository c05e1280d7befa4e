"""python -m locust_spec.tune: spec-tune."""

from locust_spec.tune.cli import main

main()
