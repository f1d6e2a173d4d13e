"""The operator HTTP API: start, inspect and repair sagas; bulk repairs; dead letters."""

from coordinator.api.app import create_app
from coordinator.api.auth import AuthConfigError, Authenticator, Principal, Role, TokenAuth
from coordinator.api.errors import ApiError, ErrorBody
from coordinator.api.jobs import RepairJobRunner
from coordinator.api.serve import serve
from coordinator.api.settings import ApiSettings

__all__ = [
    "ApiError",
    "ApiSettings",
    "AuthConfigError",
    "Authenticator",
    "ErrorBody",
    "Principal",
    "RepairJobRunner",
    "Role",
    "TokenAuth",
    "create_app",
    "serve",
]
