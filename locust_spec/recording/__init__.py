"""What a finished request becomes: Locust events, a row, histograms, the summary, opt-in traces."""
