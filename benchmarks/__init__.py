"""Performance benchmarks for the candidate_sampling package (the book's "Benchmarks" appendix).

Run ``python benchmarks/run.py --quick`` (a few minutes) or ``python benchmarks/run.py
--out book/benchmarks`` (the full suite behind the appendix). Not part of the package.
"""
