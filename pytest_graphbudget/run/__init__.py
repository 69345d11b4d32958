"""One budget run, with pytest or without: the profiler over the cache, the fingerprint, settings,
table checks and the end of the run.
"""
