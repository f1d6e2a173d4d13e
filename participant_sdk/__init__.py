"""Participant SDK: build idempotent TCC and saga-step handlers that talk to the coordinator."""
