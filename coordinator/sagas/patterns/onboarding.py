"""Onboarding: create the account, set up billing (held, then confirmed), grant access to
each product, and send the welcome last. A failure undoes what was done, so no
half-onboarded customer is left with an account and no billing.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from coordinator.language.nodes import ForEach
from coordinator.language.saga import Saga, SagaStep, StepContext, TccStep
from coordinator.sagas.patterns.catalog import FORWARD_RETRY, Pattern, build_saga

__all__ = ["ONBOARDING", "OnboardingInput", "onboarding_saga"]

VERSION = 1


class OnboardingInput(BaseModel):
    customer_id: str = Field(min_length=1, max_length=100)
    email: str = Field(min_length=3, max_length=320)
    plan: str = Field(min_length=1, max_length=100)
    products: list[str] = Field(default_factory=list, max_length=50)


def _customer(ctx: StepContext[OnboardingInput]) -> dict[str, Any]:
    return {"customer_id": ctx.input.customer_id, "email": ctx.input.email,
            "plan": ctx.input.plan}


def _products(ctx: StepContext[OnboardingInput]) -> list[str]:
    return list(ctx.input.products)


def _grant(ctx: StepContext[OnboardingInput]) -> dict[str, Any]:
    return {"customer_id": ctx.input.customer_id, "product": ctx.item}


def onboarding_saga(name: str = "onboarding", *, version: int = 1, accounts: str = "accounts",
                    billing: str | None = "billing", access: str = "access",
                    notifications: str = "notifications") -> type[Saga]:
    """``billing=None`` for free plans: no billing step."""
    steps: list[Any] = [SagaStep("create_account", accounts, "create", payload=_customer,
                                 compensable=True, retry=FORWARD_RETRY)]
    if billing is not None:
        steps.append(TccStep("set_up_billing", billing, "subscribe", payload=_customer,
                             retry=FORWARD_RETRY))
    steps += [
        ForEach("products", items=_products, max_concurrency=None, max_items=50,
                body=(SagaStep("grant_access", access, "grant", payload=_grant,
                               compensable=True, retry=FORWARD_RETRY),)),
        SagaStep("welcome", notifications, "send_welcome", payload=_customer,
                 compensable=False, retry=FORWARD_RETRY),
    ]
    return build_saga("onboarding", VERSION, name=name, version=version,
                      input_model=OnboardingInput, steps=steps,
                      description="Account, billing, access to each product, then welcome.")


ONBOARDING = Pattern("onboarding", VERSION, "account, billing and access together, welcome last",
                     [(1, "create_account, set_up_billing (TCC, optional), products "
                          "(for-each of grant_access), welcome (final)")], onboarding_saga)
