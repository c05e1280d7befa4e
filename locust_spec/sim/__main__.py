"""`python -m locust_spec.sim`: the spec-sim server."""

from locust_spec.sim.cli import main

main()
