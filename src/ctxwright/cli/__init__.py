"""The ``ctxwright`` command line: a thin layer over :class:`ctxwright.Harness`."""
