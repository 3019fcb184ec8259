"""The next dose due kept on each `bottles` document: its fields at provisioning (`initial_fields`), as a
request's new doses move them on (`after_doses`, pure: ingestion writes it guarded by the state it read), and the
check's write after a review (`review_update`). Kept so that the late-dose check is one indexed range query
(`dose_late_at <= now`) however large the fleet. The fields, and why a lagging `dose_due` never skips an
unsatisfied slot: docs/checks.md, "How the next dose due moves on".
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pymongo import UpdateOne

from shared.doses.bottle_document import BottleDocument, BottleFilter, BottleUpdate
from shared.doses.schedules import DosePlan, IntervalSchedule, Review, TimesSchedule, parse_schedule


def plan_of(bottle: Mapping[str, Any]) -> DosePlan:
    """The dose plan stored on a `bottles` document (`schedule_from` defaults to provisioning)."""
    return DosePlan(
        schedule=parse_schedule(bottle["schedule"]),
        grace=timedelta(minutes=bottle["grace_minutes"]),
        start=bottle.get("schedule_from") or bottle["provisioned_at"],
    )


def initial_fields(plan: DosePlan, doses: Sequence[datetime] = ()) -> BottleDocument:
    """The status fields of a schedule that takes effect at `plan.start`."""
    due = plan.first_due(doses)
    return {"schedule_from": plan.start, "dose_due": due, "dose_late_at": due + plan.grace}


@dataclass(frozen=True)
class DoseAdvance:
    """What a bottle's new doses change of its dose tracking: the fields to set (`dose_due`, `dose_late_at`, only
    those that change) and, on `every_hours` schedules, the earliest new dose for the check to review from."""

    fields: BottleDocument
    review_from: datetime | None = None


def after_doses(plan: DosePlan, stored: BottleDocument, new: Sequence[datetime]) -> DoseAdvance:
    """The dose tracking after the doses `new` to the bottle (not in its `doses` yet), from the state `stored`
    (the bottle as read, whose `schedule_from` is `plan.start`). Pure: the caller writes it guarded by that state.

    `times`: a dose satisfies the due slot when that slot is the earliest one within grace of the dose; then the
    next slot is due. Every dose the bottle knows is looked at, in time order, not only the new ones: a dose
    stored while an earlier slot was still due (another request's, written first) moves the due slot on once
    that slot is satisfied. A dose can move it only off its own earliest slot, which `dose_due` (never moving
    backwards) leaves for good, so no dose counts twice.
    `every_hours`: a new dose taken before the due slot went late makes the next one due `every` after it; a
    dose after that leaves the late slot for the check to find. Any dose restarts the count from itself, so one
    that arrives late (buffered) may make slots after it late that the stored state does not know of: it asks
    the check to review from it, at the latest when its own next slot's grace runs out."""
    due: datetime | None = stored.get("dose_due")
    late_at: datetime | None = stored.get("dose_late_at")
    review_from = None
    if isinstance(plan.schedule, IntervalSchedule):
        ordered = sorted(set(new))
        due, late_at = _interval_advances(plan, plan.schedule.every, ordered, due, late_at)
        review_from = ordered[0] if ordered else None
    else:
        known = sorted({*(stored.get("doses") or []), *new})
        due, late_at = _times_advances(plan, plan.schedule, known, due, late_at)
    changed: BottleDocument = {}
    if due is not None and due != stored.get("dose_due"):
        changed["dose_due"] = due
    if late_at is not None and late_at != stored.get("dose_late_at"):
        changed["dose_late_at"] = late_at
    return DoseAdvance(changed, review_from)


def _times_advances(
    plan: DosePlan, schedule: TimesSchedule, doses: Sequence[datetime], due: datetime | None, late_at: datetime | None
) -> tuple[datetime | None, datetime | None]:
    """Each dose, in time order, moves the due slot on if it is the earliest slot within grace of the dose (a dose
    more than grace before the due slot cannot reach it)."""
    if due is None:
        return due, late_at
    for dose in doses:
        if dose < due - plan.grace:
            continue
        slot = schedule.first_slot_from(max(plan.start, dose - plan.grace))
        if slot <= dose + plan.grace and due == slot:
            due = schedule.slot_after(slot)
            late_at = due + plan.grace
    return due, late_at


def _interval_advances(
    plan: DosePlan, every: timedelta, doses: Sequence[datetime], due: datetime | None, late_at: datetime | None
) -> tuple[datetime | None, datetime | None]:
    """Each new dose, in time order: taken before the due slot's grace ran out, the next slot is due `every`
    after it (never earlier than the one stored); the check must look again at the latest when the dose's own
    next slot's grace runs out; taken just before the schedule started, it is due `every` after the dose rather
    than after the start."""
    for dose in doses:
        nearest_late = dose + every + plan.grace
        if late_at is not None and late_at >= dose:
            due = dose + every if due is None else max(due, dose + every)
            late_at = max(late_at, nearest_late)
        late_at = nearest_late if late_at is None else min(late_at, nearest_late)
        if dose < plan.start <= dose + every and due == plan.start + every:
            due, late_at = dose + every, nearest_late
    return due, late_at


def _due(due: datetime, grace: timedelta) -> BottleDocument:
    return {"dose_due": due, "dose_late_at": due + grace}


def review_update(bottle: Mapping[str, Any], plan: DosePlan, review: Review) -> UpdateOne:
    """The check's write after reviewing a bottle: the next due slot, and the latest slot notified late with the
    user it was notified to (the owner as read: a bottle handed over since still has that notification resolved,
    in that user's partition). Guarded by the state it reviewed, so a dose that arrived meanwhile is never
    undone: the bottle then stays in the sweep and the next run reviews it with that dose."""
    update: BottleUpdate = {"$set": _due(review.next_due, plan.grace), "$unset": {"dose_review_from": ""}}
    if review.late:
        update["$max"] = {"late_episode": review.late[-1]}
        update["$addToSet"] = {"late_episode_users": bottle["user_id"]}
    guard: BottleFilter = {
        "_id": bottle["_id"],
        "bottle_id": bottle["_id"],
        "schedule_from": plan.start,
        "dose_due": bottle["dose_due"],
        "dose_seq": bottle.get("dose_seq"),  # null matches "never set"
    }
    return UpdateOne(guard, update)
