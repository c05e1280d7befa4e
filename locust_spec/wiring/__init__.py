"""The Locust wiring: options, the run object per environment, users, the ladder, workers and master."""
