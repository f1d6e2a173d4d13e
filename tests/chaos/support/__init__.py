"""Shared machinery of the chaos scenarios: process stack, TCP proxy, driver and auditor."""
