"""The digits example of gradagg: an MLP on sklearn's 8x8 digits trained by W worker processes
through a real gradagg-server. Shared by examples/digits_run.py (the main job) and
examples/digits_study.py (the convergence study)."""
