"""Saved plans: the JSON document of a plan, by its content id, for apply and terraform."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gpuprov.errors import StoreError, UsageError
from gpuprov.store.database import Database, parse_time


@dataclass(frozen=True)
class SavedPlan:
    id: str
    created_at: datetime
    gpu: str
    gpus: int
    policy: str
    hourly_usd: str


class PlanStore(Database):
    def save(self, doc: dict[str, Any]) -> SavedPlan:
        """Store a plan document; saving the same plan again changes nothing."""
        self.ensure_schema()
        from sqlalchemy.exc import SQLAlchemyError
        from sqlmodel import Session

        from gpuprov.store.tables import PlanRow

        row = PlanRow(id=doc["plan_id"], created_at=datetime.now(UTC), gpu=doc["gpu"], gpus=int(doc["gpus"]),
                      policy=str(doc.get("policy") or "flags"), hourly_usd=str(doc["hourly_cost_usd"]),
                      document=json.dumps(doc, sort_keys=True))
        try:
            with Session(self.engine()) as session:
                existing = session.get(PlanRow, row.id)
                if existing is None:
                    session.add(row)
                    session.commit()
                    return _saved(row)
                return _saved(existing)
        except SQLAlchemyError as exc:
            raise StoreError(f"could not save plan {row.id}: {exc}") from exc

    def list(self) -> list[SavedPlan]:
        self.ensure_schema()
        rows = self._rows("SELECT id, created_at, gpu, gpus, policy, hourly_usd FROM gpuprov_plan "
                          "ORDER BY created_at DESC, id", {})
        return [SavedPlan(r[0], parse_time(r[1]), r[2], int(r[3]), r[4], r[5]) for r in rows]

    def get(self, plan_id: str) -> dict[str, Any]:
        """A saved plan's document by id or unique id prefix."""
        self.ensure_schema()
        if not plan_id or any(c in plan_id for c in "%_"):
            raise UsageError(f"not a plan id: {plan_id!r}")
        rows = self._rows("SELECT id, document FROM gpuprov_plan WHERE id LIKE :p ORDER BY id",
                          {"p": f"{plan_id}%"})
        if not rows:
            raise UsageError(f"no saved plan {plan_id!r}",
                             hint="gpuprov plans lists them; gpuprov plan --save stores one")
        if len(rows) > 1:
            raise UsageError(f"plan id {plan_id!r} is ambiguous: {', '.join(r[0] for r in rows[:5])}")
        doc: dict[str, Any] = json.loads(rows[0][1])
        return doc


def _saved(row: Any) -> SavedPlan:
    created = row.created_at if row.created_at.tzinfo else row.created_at.replace(tzinfo=UTC)
    return SavedPlan(row.id, created, row.gpu, row.gpus, row.policy, row.hourly_usd)
