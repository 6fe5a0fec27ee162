"""Saved plans: the JSON document of a plan, by its content id, for apply and terraform."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from gpuprov.errors import StoreError, UsageError
from gpuprov.names import show
from gpuprov.store.database import Database, first_line, parse_time

if TYPE_CHECKING:
    from gpuprov.plandoc import PlanDocument


@dataclass(frozen=True)
class SavedPlan:
    id: str
    created_at: datetime
    gpu: str
    gpus: int
    policy: str
    hourly_usd: str


class PlanStore(Database):
    def save(self, doc: PlanDocument) -> SavedPlan:
        """Store a plan document; saving the same plan again changes nothing."""
        self.ensure_schema()
        from sqlalchemy.exc import SQLAlchemyError
        from sqlmodel import Session

        from gpuprov.plandoc import to_json
        from gpuprov.store.tables import PlanRow

        row = PlanRow(
            id=doc.plan_id,
            created_at=datetime.now(UTC),
            gpu=doc.gpu,
            gpus=doc.gpus,
            policy=doc.policy or "flags",
            hourly_usd=str(doc.costs.hourly_usd.quantize(Decimal("0.0001"))),
            document=to_json(doc, indent=None),
        )
        try:
            with Session(self.engine()) as session:
                existing = session.get(PlanRow, row.id)
                if existing is None:
                    session.add(row)
                    session.commit()
                    return _saved(row)
                return _saved(existing)
        except SQLAlchemyError as exc:
            raise StoreError(f"could not save plan {row.id}: {first_line(exc)}") from exc

    def list(self) -> list[SavedPlan]:
        self.ensure_schema()
        rows = self._records(
            "SELECT id, created_at, gpu, gpus, policy, hourly_usd FROM gpuprov_plan ORDER BY created_at DESC, id", {}
        )
        return [
            SavedPlan(r["id"], parse_time(r["created_at"]), r["gpu"], int(r["gpus"]), r["policy"], r["hourly_usd"])
            for r in rows
        ]

    def get(self, plan_id: str) -> PlanDocument:
        """A saved plan's document by id or unique id prefix."""
        self.ensure_schema()
        if not plan_id or any(c in plan_id for c in "%_"):
            raise UsageError(f"not a plan id: {show(plan_id)}")
        rows = self._rows("SELECT id, document FROM gpuprov_plan WHERE id LIKE :p ORDER BY id", {"p": f"{plan_id}%"})
        if not rows:
            raise UsageError(
                f"no saved plan {show(plan_id)}", hint="gpuprov plans lists them; gpuprov plan --save stores one"
            )
        if len(rows) > 1:
            raise UsageError(f"plan id {plan_id!r} is ambiguous: {', '.join(r[0] for r in rows[:5])}")
        from gpuprov.plandoc import from_json

        return from_json(rows[0][1], where=f"saved plan {rows[0][0]}")


def _saved(row: Any) -> SavedPlan:
    created = row.created_at if row.created_at.tzinfo else row.created_at.replace(tzinfo=UTC)
    return SavedPlan(row.id, created, row.gpu, row.gpus, row.policy, row.hourly_usd)
