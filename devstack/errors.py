"""Errors raised by devstack.

Hierarchy::

    DevstackError
    ├── ServiceError        a service failed to install, start, stop or become healthy
    └── ProvisionError      a test service could be had neither from Docker nor locally
"""

from __future__ import annotations


class DevstackError(Exception):
    """Root of every error devstack raises."""


class ServiceError(DevstackError):
    """A local service could not be installed, started, stopped or checked."""


class ProvisionError(DevstackError):
    """No way to obtain a service the tests need."""
