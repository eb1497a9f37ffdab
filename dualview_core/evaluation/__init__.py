"""Evaluation, pure parts: the benchmark registry, dense retrieval, scoring runs into per-query values
with bootstrap intervals, and the headline numbers two runs are compared on. The runner is
`tasks.evaluation`."""
