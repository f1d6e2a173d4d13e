"""Coordinator observability: spans, Prometheus metrics, stuck-saga detection.

Nothing here is imported by the store at runtime except :mod:`.tracing`; the rest is wired by
the worker (:class:`WorkerObservability`) and mounted on the API (:func:`mount_observability`).
"""
