"""A small customer-service domain for prompt ablation: orders, refunds, a policy with rules.

Why our own: an ablation needs tasks whose right outcome depends on *named sections* of the
system prompt (the refund window lives in "Refunds", the reason codes too, the cancellation rule
in "Cancellations"), tools that are deterministic, and a final state code can read. The tools
here are deliberately permissive -- ``refund_order`` refunds a 45-day-old order, ``cancel_order``
cancels a shipped one -- because enforcing the policy is the agent's job, the thing the prompt's
sections are there to teach; a tool that refused would hide what a missing section changes.

:func:`make_env` builds a fresh in-memory shop for every run (12 orders of 4 customers, fixed
"today"), so no run sees another's refunds. ``tasks.jsonl`` beside this file holds the tasks and
``policy.md`` the system prompt; ``benchmarks/ablation.py`` runs them.
"""

from __future__ import annotations

import copy
from typing import Any

from ctxwright.ablation import Environment

#: customer e-mail -> name
CUSTOMERS = {
    "ana@example.com": "Ana Silva",
    "ben@example.com": "Ben Okafor",
    "chen@example.com": "Chen Wei",
    "dana@example.com": "Dana Levi",
}

#: the shop as it is at the start of every run (days_since_delivery: None until delivered)
ORDERS: dict[str, dict[str, Any]] = {
    "A1001": {"email": "ana@example.com", "item": "Blue kettle", "total": 39.0, "status": "delivered", "days": 5},
    "A1002": {"email": "ana@example.com", "item": "Desk lamp", "total": 25.5, "status": "processing", "days": None},
    "A1003": {"email": "ben@example.com", "item": "Ceramic mug set", "total": 18.0, "status": "delivered", "days": 3},
    "A1004": {"email": "ben@example.com", "item": "Office chair", "total": 149.0, "status": "shipped", "days": None},
    "A1005": {"email": "chen@example.com", "item": "Wool scarf", "total": 22.0, "status": "delivered", "days": 45},
    "A1006": {
        "email": "chen@example.com",
        "item": "Running shoes",
        "total": 89.99,
        "status": "processing",
        "days": None,
    },
    "A1007": {"email": "dana@example.com", "item": "Headphones", "total": 59.0, "status": "delivered", "days": 12},
    "A1008": {"email": "dana@example.com", "item": "Phone case", "total": 12.0, "status": "cancelled", "days": None},
    "A1009": {"email": "ana@example.com", "item": "Yoga mat", "total": 30.0, "status": "shipped", "days": None},
    "A1010": {"email": "ben@example.com", "item": "Backpack", "total": 45.0, "status": "delivered", "days": 31},
    "A1011": {"email": "chen@example.com", "item": "Notebook pack", "total": 9.5, "status": "processing", "days": None},
    "A1012": {"email": "dana@example.com", "item": "Water bottle", "total": 15.0, "status": "delivered", "days": 29},
    "A1013": {"email": "dana@example.com", "item": "Standing desk", "total": 320.0, "status": "delivered", "days": 10},
}

_ADDRESSES = {
    "ana@example.com": "4 Rose Court, Bristol",
    "ben@example.com": "88 King Street, Manchester",
    "chen@example.com": "19 Canal Walk, Birmingham",
    "dana@example.com": "2 Station Road, York",
}


class Shop:
    """The state of one run: the orders (with address, refund reason, escalation) and the
    tickets handed to a human."""

    def __init__(self) -> None:
        self.orders = copy.deepcopy(ORDERS)
        for o in self.orders.values():
            o.update(address=_ADDRESSES[o["email"]], refund_reason=None, escalated=False)
        self.tickets: list[dict[str, str]] = []

    def find(self, order_id: str) -> dict[str, Any] | None:
        return self.orders.get(order_id.strip().upper())

    def state(self) -> dict[str, Any]:
        """What ``expected_state`` paths read: ``orders.A1003.status``, ``tickets.0.order_id``."""
        keys = ("status", "address", "refund_reason", "escalated")
        return {
            "orders": {oid: {k: o[k] for k in keys} for oid, o in self.orders.items()},
            "tickets": copy.deepcopy(self.tickets),
        }


def make_env() -> Environment:
    """A fresh shop and its six tools (closures over it): what every run of a task works on."""
    shop = Shop()

    def get_order(order_id: str) -> dict[str, Any]:
        """Look up one order: its item, total, status, delivery address and days since delivery.

        Args:
            order_id: the order ID, e.g. A1001
        """
        o = shop.find(order_id)
        if o is None:
            return {"error": f"no order {order_id}"}
        return {
            "order_id": order_id.strip().upper(),
            "item": o["item"],
            "total_usd": o["total"],
            "status": o["status"],
            "days_since_delivery": o["days"],
            "address": o["address"],
        }

    def list_orders(email: str) -> dict[str, Any]:
        """List the orders of the customer with this e-mail address, with their status.

        Args:
            email: the customer's e-mail address
        """
        key = email.strip().lower()
        if key not in CUSTOMERS:
            return {"error": f"no customer with e-mail {email}"}
        mine = [{"order_id": oid, "item": o["item"], "status": o["status"]} for oid, o in shop.orders.items()]
        return {"customer": CUSTOMERS[key], "orders": [m for m in mine if shop.orders[m["order_id"]]["email"] == key]}

    def refund_order(order_id: str, reason: str) -> dict[str, Any]:
        """Refund an order in full and record the reason code.

        Args:
            order_id: the order ID, e.g. A1001
            reason: the reason code
        """
        o = shop.find(order_id)
        if o is None:
            return {"error": f"no order {order_id}"}
        if o["status"] == "refunded":
            return {"error": f"order {order_id} is already refunded"}
        o["status"], o["refund_reason"] = "refunded", reason.strip().lower()
        return {"order_id": order_id.strip().upper(), "status": "refunded", "refunded_usd": o["total"]}

    def cancel_order(order_id: str) -> dict[str, Any]:
        """Cancel an order.

        Args:
            order_id: the order ID, e.g. A1001
        """
        o = shop.find(order_id)
        if o is None:
            return {"error": f"no order {order_id}"}
        o["status"] = "cancelled"
        return {"order_id": order_id.strip().upper(), "status": "cancelled"}

    def update_address(order_id: str, address: str) -> dict[str, Any]:
        """Change the delivery address of an order.

        Args:
            order_id: the order ID, e.g. A1001
            address: the new delivery address
        """
        o = shop.find(order_id)
        if o is None:
            return {"error": f"no order {order_id}"}
        o["address"] = address.strip()
        return {"order_id": order_id.strip().upper(), "address": o["address"]}

    def escalate_to_human(order_id: str, summary: str) -> dict[str, Any]:
        """Hand the case to a human colleague, who answers the customer within a day.

        Args:
            order_id: the order ID, e.g. A1001
            summary: one line saying what the customer wants
        """
        o = shop.find(order_id)
        if o is None:
            return {"error": f"no order {order_id}"}
        o["escalated"] = True
        shop.tickets.append({"order_id": order_id.strip().upper(), "summary": summary})
        return {"order_id": order_id.strip().upper(), "ticket": len(shop.tickets)}

    tools = [get_order, list_orders, refund_order, cancel_order, update_address, escalate_to_human]
    return Environment(tools=tools, state=shop.state)
