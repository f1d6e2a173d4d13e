"""Local development services (Postgres, Kafka, Jaeger) for the demo, tests and benchmarks."""
