"""ETL batch with compensation: open a batch, load each partition (a bounded for-each), then
publish it. A partition that fails for good unloads every partition loaded and discards the
batch, so readers never see half a batch; publishing is the point of no return.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from coordinator.language.nodes import ForEach
from coordinator.language.saga import Saga, SagaStep, StepContext
from coordinator.sagas.patterns.catalog import FORWARD_RETRY, Pattern, build_saga

__all__ = ["ETL_BATCH", "EtlBatchInput", "etl_batch_saga"]

VERSION = 1


class EtlBatchInput(BaseModel):
    batch_id: str = Field(min_length=1, max_length=100)
    dataset: str = Field(min_length=1, max_length=200)
    partitions: list[str] = Field(min_length=1, max_length=1000)


def _batch(ctx: StepContext[EtlBatchInput]) -> dict[str, Any]:
    return {"batch_id": ctx.input.batch_id, "dataset": ctx.input.dataset}


def _partitions(ctx: StepContext[EtlBatchInput]) -> list[str]:
    return list(ctx.input.partitions)


def _partition(ctx: StepContext[EtlBatchInput]) -> dict[str, Any]:
    return {"batch_id": ctx.input.batch_id, "partition": ctx.item}


def etl_batch_saga(name: str = "etl_batch", *, version: int = 1, warehouse: str = "warehouse",
                   partitions_at_once: int = 4, max_partitions: int = 1000) -> type[Saga]:
    steps = (
        SagaStep("open_batch", warehouse, "open_batch", payload=_batch, compensable=True,
                 retry=FORWARD_RETRY, description="a staging area; discarded on rollback"),
        ForEach("partitions", items=_partitions, max_concurrency=partitions_at_once,
                max_items=max_partitions,
                body=(SagaStep("load", warehouse, "load_partition", payload=_partition,
                               compensable=True, retry=FORWARD_RETRY),)),
        SagaStep("publish", warehouse, "publish_batch", payload=_batch, compensable=False,
                 retry=FORWARD_RETRY, description="swap the batch in: final"),
    )
    return build_saga("etl_batch", VERSION, name=name, version=version,
                      input_model=EtlBatchInput, steps=steps,
                      description="Open a batch, load each partition, publish; unload all "
                                  "on failure.")


ETL_BATCH = Pattern("etl_batch", VERSION, "all partitions published, or none",
                    [(1, "open_batch, partitions (for-each of load), publish (final)")],
                    etl_batch_saga)
