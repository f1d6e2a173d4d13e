"""The runtime: the worker, the serverless functions, what they publish and decode, and the
wake-up hints."""
