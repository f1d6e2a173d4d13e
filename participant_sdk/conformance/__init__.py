"""A conformance kit for participants in any language: ``python -m participant_sdk.conformance``.

It drives a running participant over real Kafka through the contract of
``docs/wire-protocol.md`` and reports one pass/fail line per case.
"""

from participant_sdk.conformance.cases import ActionSpec, CaseResult, KitConfig, run_cases

__all__ = ["ActionSpec", "CaseResult", "KitConfig", "run_cases"]
