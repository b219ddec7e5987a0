"""Building blocks of ``benchmarks/run.py``: labeled set, systems, metrics, timings."""
