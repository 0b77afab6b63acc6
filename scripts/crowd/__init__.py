"""scripts/bench_crowd.py in small modules: the server child process (server), /proc figures (procs), the server
alone through API callers (callers), the co-located Chromium pages (pages, visitors, colocated) and what is
printed (report)."""
