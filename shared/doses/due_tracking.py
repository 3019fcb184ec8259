"""The next-dose status kept on each `bottles` document, so that the late-dose check is one indexed range query
(`dose_late_at <= now`) that returns only the bottles whose due dose is late, however large the fleet.

Fields: `schedule_from` (when the schedule took effect), `dose_due` (the earliest slot neither satisfied nor
found late), `dose_late_at` (when the check must look next: `dose_due` + grace, or earlier), `doses` (the newest
dose times, in order: what the check re-plays), `dose_pending` (a dose arrived since the check last resolved
this bottle's late notifications), `late_episode` (the latest slot notified late and not yet resolved), and for
`every_hours` schedules `dose_review_from` (the earliest dose that arrived since the last review) and
`dose_seq` (a version the check's write is guarded by).

Ingestion moves `dose_due` forward without reading it: every op is guarded so that it applies only when the
stored state is the one the op was computed for. An op may fail to apply (another dose got there first, the
schedule just changed, a retried request): then `dose_due` stays behind, the check finds the bottle when that
stale slot's grace runs out, re-plays the doses and moves it on without notifying. It never moves past a slot
that is still unsatisfied, so a late dose is never missed.
"""

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from pymongo import UpdateOne

from shared.doses.schedules import DosePlan, IntervalSchedule, Review, TimesSchedule, parse_schedule


def plan_of(bottle: dict[str, Any]) -> DosePlan:
    """The dose plan stored on a `bottles` document (`schedule_from` defaults to provisioning)."""
    return DosePlan(
        schedule=parse_schedule(bottle["schedule"]),
        grace=timedelta(minutes=bottle["grace_minutes"]),
        start=bottle.get("schedule_from") or bottle["provisioned_at"],
    )


def initial_fields(plan: DosePlan, doses: Sequence[datetime] = ()) -> dict[str, Any]:
    """The status fields of a schedule that takes effect at `plan.start`."""
    due = plan.first_due(doses)
    return {"schedule_from": plan.start, "dose_due": due, "dose_late_at": due + plan.grace}


def ingestion_updates(
    bottle_id: str, plan: DosePlan | None, doses: Sequence[datetime], fresh: Sequence[datetime], history: int
) -> list[UpdateOne]:
    """The ops a request's doses add to its one bulk write to `bottles` (no read).

    `doses` are every dose in the request (retries included: these ops are idempotent); `fresh` are the
    ones stored for the first time, the only ones that may advance a `times` schedule (a retry must not
    count a dose twice)."""
    key = {"_id": bottle_id, "bottle_id": bottle_id}
    ops = [
        UpdateOne(
            {**key, "doses": {"$ne": dose}},
            {"$push": {"doses": {"$each": [dose], "$sort": 1, "$slice": -history}}},
        )
        for dose in sorted(set(doses))
    ]
    if plan is None:
        return ops
    scheduled = {**key, "schedule_from": plan.start}
    if isinstance(plan.schedule, IntervalSchedule):
        ops += _interval_advances(scheduled, plan, plan.schedule.every, sorted(set(doses)))
    else:
        ops += _times_advances(scheduled, plan, plan.schedule, sorted(set(fresh)))
    return ops


def _due(due: datetime, grace: timedelta) -> dict[str, datetime]:
    return {"dose_due": due, "dose_late_at": due + grace}


def _times_advances(
    scheduled: dict[str, Any], plan: DosePlan, schedule: TimesSchedule, fresh: Sequence[datetime]
) -> list[UpdateOne]:
    """A dose satisfies the due slot when that slot is the earliest one within grace of it: then the next
    slot is due. Guarded by `dose_due` equality, so it applies at most once and only to that slot."""
    ops = []
    for dose in fresh:
        slot = schedule.first_slot_from(max(plan.start, dose - plan.grace))
        if slot <= dose + plan.grace:
            ops.append(
                UpdateOne({**scheduled, "dose_due": slot}, {"$set": _due(schedule.slot_after(slot), plan.grace)})
            )
    return ops


def _interval_advances(
    scheduled: dict[str, Any], plan: DosePlan, every: timedelta, doses: Sequence[datetime]
) -> list[UpdateOne]:
    """A dose taken before the due slot went late makes the next one due `every` after it. A dose after
    that leaves the late slot for the check to find. Any dose restarts the count from itself, so one that
    arrives late (buffered) may make slots after it late that the stored state does not know of: it asks
    the check to review from it (`$min`), at the latest when its own next slot's grace runs out."""
    ops = []
    for dose in doses:
        ops.append(UpdateOne({**scheduled, "dose_late_at": {"$gte": dose}}, {"$max": _due(dose + every, plan.grace)}))
        review = {"dose_late_at": dose + every + plan.grace, "dose_review_from": dose}
        ops.append(UpdateOne(scheduled, {"$min": review, "$inc": {"dose_seq": 1}}))
        if dose < plan.start <= dose + every:
            # Taken just before the schedule started: due `every` after it rather than after the start.
            first = {**scheduled, "dose_due": plan.start + every}
            ops.append(UpdateOne(first, {"$set": _due(dose + every, plan.grace)}))
    return ops


def review_update(bottle: dict[str, Any], plan: DosePlan, review: Review) -> UpdateOne:
    """The check's write after reviewing a bottle: the next due slot, and the latest slot notified late.
    Guarded by the state it reviewed, so a dose that arrived meanwhile is never undone: the bottle then
    stays in the sweep and the next run reviews it with that dose."""
    update: dict[str, Any] = {"$set": _due(review.next_due, plan.grace), "$unset": {"dose_review_from": ""}}
    if review.late:
        update["$max"] = {"late_episode": review.late[-1]}
    guard = {
        "_id": bottle["_id"],
        "bottle_id": bottle["_id"],
        "schedule_from": plan.start,
        "dose_due": bottle["dose_due"],
        "dose_seq": bottle.get("dose_seq"),  # null matches "never set"
    }
    return UpdateOne(guard, update)
