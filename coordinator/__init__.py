"""The saga coordinator: saga classes, the pure engine, the Postgres store and the workers."""
