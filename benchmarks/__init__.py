"""Side-by-side performance benchmarks of the fairseq_qknorm systems.

Run with ``python -m benchmarks.run``.
"""
