"""Side-by-side performance benchmarks of the fairseq_qknorm systems (``python -m benchmarks.run``)."""
