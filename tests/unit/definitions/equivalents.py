"""The JMESPath equivalents of the Python mappers of the example sagas and the pattern
library, keyed as ``export`` asks (``node.field``). Each is checked against its function."""

from __future__ import annotations

ORDER = {
    "reserve_funds.payload": "{customer: input.customer_id, amount: input.amount_cents}",
    "reserve_stock.payload": "{sku: input.sku, quantity: input.quantity}",
    "create_shipment.payload": "{address: input.address, items: repeat(input.sku, input.quantity)}",
    "fulfil.input": "input",
}
CHECKOUT = {
    "reserve_funds.payload": "{customer: input.customer_id, amount: input.amount_cents}",
    "lines.items": "input.lines",
    "reserve_stock.payload": "{sku: item.sku, quantity: item.quantity}",
    "carrier_a.payload": "{order_id: input.order_id, address: input.address, "
                         "parcels: sum(input.lines[].quantity)}",
    "carrier_b.payload": "{order_id: input.order_id, address: input.address, "
                         "parcels: sum(input.lines[].quantity)}",
}
_ASK = "{request_id: input.request_id, requester: input.requester, summary: input.summary}"
APPROVAL = {
    "approve.payload": _ASK,
    "act.payload": "merge({request_id: input.request_id}, input.details)",
    **{f"{task}.{field}": expr for task in ("approval", "approver_1", "approver_2",
                                            "approver_3")
       for field, expr in (("title", "join('', ['Approve ', input.request_id, ' for ', "
                                     "input.requester])"),
                           ("description", "input.summary"))},
}
ORDER_PATTERN = {
    "hold_payment.payload": "{order_id: input.order_id, customer: input.customer_id, "
                            "amount: input.amount_cents}",
    "lines.items": "input.lines",
    "reserve_stock.payload": "merge({order_id: input.order_id}, item)",
    "ship.payload": "{order_id: input.order_id, address: input.address, "
                    "parcels: sum(input.lines[].quantity)}",
}
_CUSTOMER = "{customer_id: input.customer_id, email: input.email, plan: input.plan}"
ONBOARDING = {
    "create_account.payload": _CUSTOMER,
    "set_up_billing.payload": _CUSTOMER,
    "products.items": "input.products",
    "grant_access.payload": "{customer_id: input.customer_id, product: item}",
    "welcome.payload": _CUSTOMER,
}
_BATCH = "{batch_id: input.batch_id, dataset: input.dataset}"
ETL = {
    "open_batch.payload": _BATCH,
    "partitions.items": "input.partitions",
    "load.payload": "{batch_id: input.batch_id, partition: item}",
    "publish.payload": _BATCH,
}
REFUND = {
    "restock.payload": "{refund_id: input.refund_id, items: input.returned}",
    "restock.when": "input.returned",
    "pay_back.payload": "{refund_id: input.refund_id, order_id: input.order_id, "
                        "amount: input.amount_cents}",
}
