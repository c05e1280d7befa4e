"""spec-verdict: merge two arms' runs into the speculative-decoding verdict and its report."""
