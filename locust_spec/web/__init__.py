"""The web pages: the live Speculation page (its time series and assets) and the web UI's Speculation tab."""
