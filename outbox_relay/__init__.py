"""Transactional outbox: write messages inside your transaction; the relay publishes them."""
