"""The three checks' rules: for each, the collection and fields it reads, its detect and resolve sweeps (the
selector of bottles in trouble, or whose notified trouble ended, and what a bottle found there leads to), and how
it settles a marker write that a device request made miss. Nothing here reads or writes the store: `run.py` does.

Every write a rule makes is guarded by the state it read, so a run racing ingestion or another run never undoes
either. Why the selectors have this shape, and which fields each check reads and sets: docs/checks.md.
"""

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar, Final, cast

from pymongo import UpdateMany, UpdateOne

from shared.devices.heartbeat_document import (
    ALIVE_AT,
    SILENT_PENDING,
    HeartbeatDocument,
    HeartbeatFilter,
    HeartbeatUpdate,
    SilentUnset,
)
from shared.doses.bottle_document import BottleDocument, BottleFilter, BottleUpdate
from shared.doses.due_tracking import plan_of, review_update
from shared.doses.schedules import DosePlan, Review
from shared.notifications import documents as notifications
from shared.notifications.documents import Episode, Kind
from shared.settings import Settings
from shared.store import schema

# A late dose found this long after it went late (the checks were down) is recorded but not sent.
PUSH_WITHIN = timedelta(hours=24)
# Every stored instant is after this. As the lower bound of every sweep's range it keeps the index scan off the
# null keys of bottles without that state (most of the fleet), on any engine, and turns "this marker is set"
# into a range.
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
DETECT, RESOLVE = "detect", "resolve"

Document = dict[str, Any]


@dataclass
class Writes:
    """What one batch of bottles leads to, written as (at most) three bulk writes."""

    episodes: list[Episode] = field(default_factory=list)
    resolutions: list[UpdateOne | UpdateMany] = field(default_factory=list)
    status: list[UpdateOne] = field(default_factory=list)


Handler = Callable[[Document, Writes], None]
# What a check does for a bottle whose episodes it recorded when the marker write may have missed: given the bottle
# as read again and those episodes (the same bottle's, oldest first), the writes that make the notifications
# resolved now or seen by the resolve sweep (run.py `_settle`).
Settler = Callable[[Document, list[Episode], Writes], None]


@dataclass(frozen=True)
class Sweep:
    name: str
    selector: Mapping[str, Any]
    handle: Handler


@dataclass(frozen=True)
class Check:
    kind: Kind
    collection: str
    projection: Document
    sweeps: Callable[[datetime, Settings], list[Sweep]]
    settler: Callable[[datetime, Settings], Settler]


def detect_sweep(check: Check, now: datetime, settings: Settings) -> Sweep:
    """The check's detect sweep at `now`."""
    [detect] = [sweep for sweep in check.sweeps(now, settings) if sweep.name == DETECT]
    return detect


def _key(document: Mapping[str, Any]) -> Document:
    return {"_id": document["_id"], "bottle_id": document["_id"]}


def _episode(document: Mapping[str, Any], kind: Kind, start: datetime, push: bool = True) -> Episode:
    return Episode(document["_id"], document["user_id"], document["medication"], kind, start, push)


def notified_users(users: list[str] | None, owner: str) -> list[str]:
    """The users the marked episode (or slots) may have been notified to, as the marker records them (`users`): a
    notification belongs to the user it went to, whoever owns the bottle now, and its partition is that user's.
    A marker written before markers kept their users has none: the bottle's owner (`owner`) is the only one known.
    (Users are added with `$addToSet` and `$each`, which Cosmos DB for MongoDB supports: "Array update operators"
    and "Update modifiers" in https://learn.microsoft.com/azure/cosmos-db/mongodb/feature-support-60, read
    2026-11-28.)"""
    return list(users) if users else [owner]


def _users_of(episodes: list[Episode]) -> list[str]:
    """The distinct users of `episodes`, in their order (a bottle handed over between two reads of one batch)."""
    return list(dict.fromkeys(e.user_id for e in episodes))


# --- left open and silent: one episode at a time, held in one marker -----------------------------------------


@dataclass(frozen=True)
class Marked:
    """A one-marker check's marker as read: the episode notified (None: none) and the users it was notified to
    (None: a marker written before markers kept their users, or none)."""

    episode: datetime | None
    users: list[str] | None


class OneMarker[D: (BottleDocument, HeartbeatDocument)](ABC):
    """A check whose bottle has at most one episode going on, which is notified once it lasted longer than
    `limit`; its marker holds the episode notified with the users it was notified to (one, but a check run that
    recorded it for the owner it read may add another: the notification is whichever insert came first), and its
    `pending` flag says the check has yet to look at the bottle's latest state. Left open (LeftOpenMarker, on the
    bottle) and silent (SilentMarker, on the heartbeat document) each name their fields in their own filters and
    updates, typed as their document's, so a renamed field fails mypy in the check too; the rules are here once.
    Each check's field names are its class's `Final` attributes, which mypy checks as keys of its document's types
    wherever they name a field."""

    kind: ClassVar[Kind]

    @abstractmethod
    def limit(self, settings: Settings) -> timedelta:
        """How long an episode goes on before it is notified."""

    @abstractmethod
    def typed(self, document: Document) -> D:
        """A document the check read (with its projection), as its collection's type."""

    @abstractmethod
    def current(self, document: D) -> datetime | None:
        """The start of the episode going on (None: none)."""

    @abstractmethod
    def ended(self, document: D, start: datetime) -> bool:
        """Whether the document shows the episode that began at `start` over."""

    @abstractmethod
    def marked(self, document: D) -> Marked:
        """The marker as read."""

    @abstractmethod
    def selectors(self, cutoff: datetime) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
        """Detect: an episode going on since before `cutoff`, not looked at yet; resolve: marked, not looked at."""

    @abstractmethod
    def going_on(self, document: D, episode: datetime) -> Mapping[str, Any]:
        """The guard of a write about `episode`: still going on, and not looked at by another run."""

    @abstractmethod
    def as_read(self, document: D, marked: Marked, *, users: bool = True) -> Mapping[str, Any]:
        """The guard of a write that changes the marker: as read, with its users (or without)."""

    @abstractmethod
    def mark(self, marked: Marked | None, *, pending: bool) -> Mapping[str, Any]:
        """The update that sets `pending`, and the marker if `marked`."""

    @abstractmethod
    def unmark(self) -> Mapping[str, Any]:
        """The update that unsets the marker and its users."""

    @abstractmethod
    def add_users(self, users: list[str]) -> Mapping[str, Any]:
        """The update that adds `users` to the marker's users."""

    def sweeps(self, now: datetime, settings: Settings) -> list[Sweep]:
        """Detect: the episodes going on longer than the limit and not yet marked; resolve: the bottles whose
        marked episode may be over. Both handle a bottle alike: the notified episode that ended is resolved and
        its marker goes, or is replaced by the marker of the one going on past the limit, recorded (once)."""
        cutoff = now - self.limit(settings)

        def handle(document: Document, writes: Writes) -> None:
            typed = self.typed(document)
            replaced = self._record_current(typed, writes, cutoff)
            self._resolve_ended(typed, writes, now, cleared=not replaced)

        detect, resolve = self.selectors(cutoff)
        return [Sweep(DETECT, detect, handle), Sweep(RESOLVE, resolve, handle)]

    def _resolve_ended(self, document: D, writes: Writes, now: datetime, *, cleared: bool) -> None:
        """The marked episode, if over, resolved for its users; its marker unset if `cleared` (else the marker
        write of the episode going on replaces it)."""
        marked = self.marked(document)
        if marked.episode is None or not self.ended(document, marked.episode):
            return
        for user_id in notified_users(
            marked.users, document["user_id"]
        ):  # each in its own partition of `notifications`
            writes.resolutions.append(
                notifications.resolve_episode(user_id, document["_id"], self.kind, marked.episode, now)
            )
        if cleared:  # a user a racing run added (settle) makes it miss: the next run resolves them
            writes.status.append(UpdateOne(self.as_read(document, marked), self.unmark()))

    def _record_current(self, document: D, writes: Writes, cutoff: datetime) -> bool:
        """The episode going on past the limit recorded and marked, or, already marked, seen; whether its marker
        write replaces the marker."""
        episode, marked = self.current(document), self.marked(document)
        if episode is None or not (episode < cutoff or episode == marked.episode):
            return False
        if episode == marked.episode:
            writes.status.append(UpdateOne(self.going_on(document, episode), self.mark(None, pending=False)))
            return False
        writes.episodes.append(_episode(document, self.kind, episode))
        # The user the notification goes to, as read: a bottle handed over since keeps it theirs. The marker it
        # replaces (an episode over) guards it too: missed, the run's settle resolves that one's users.
        guard = {**self.going_on(document, episode), **self.as_read(document, marked)}
        writes.status.append(UpdateOne(guard, self.mark(Marked(episode, [document["user_id"]]), pending=False)))
        return True

    def settler(self, now: datetime, settings: Settings) -> Settler:
        """The latest episode recorded: already marked, its users recorded with the marker (another run may have
        marked it for another owner, having read the bottle after a hand-over, and the notification is whichever
        insert came first); over, resolved now (for the owners it was recorded for); else marked, guarded by the
        marker and its users as read (which only the checks write, so a device request cannot make it miss), with
        `pending` set so the resolve sweep looks at it: an earlier episode's marker found there is of an episode
        over (this one began after it), resolved too, for the users it records. An earlier episode recorded for the
        bottle in the same batch (a cursor that met it twice) is over for the same reason.

        Marking is reached when the run's own marker write lost to a racing settle that added a user to the earlier
        episode's marker (`as_read`): the write that replaces a marker is guarded by its users, so that user is
        resolved here. (A device request cannot lead here: with the episode still going on, its start field is as
        the sweep read it, so the write missed on the marker or on `pending`, which only the checks write.)"""

        def settle(read: Document, recorded: list[Episode], writes: Writes) -> None:
            document = self.typed(read)
            latest = recorded[-1]
            users = _users_of([e for e in recorded if e.start == latest.start])
            over = [(e.user_id, e.start) for e in recorded if e.start != latest.start]  # (owner, episode start)
            marked = self.marked(document)
            if marked.episode == latest.start:
                if not set(users) <= set(marked.users or ()):
                    writes.status.append(UpdateOne(self.as_read(document, marked, users=False), self.add_users(users)))
            elif self.ended(document, latest.start):
                over += [(user_id, latest.start) for user_id in users]
            else:
                if marked.episode is not None:
                    over += [(user_id, marked.episode) for user_id in notified_users(marked.users, document["user_id"])]
                writes.status.append(
                    UpdateOne(self.as_read(document, marked), self.mark(Marked(latest.start, users), pending=True))
                )
            for user_id, start in over:
                writes.resolutions.append(
                    notifications.resolve_episode(user_id, document["_id"], self.kind, start, now)
                )

        return settle


class _LeftOpen(OneMarker[BottleDocument]):
    """Left open: the episode is the bottle's opening while it stays open (`open_since` with `last_action`
    "opened"), notified after LEFT_OPEN_MINUTES; over once the bottle was closed, or opened again, since."""

    kind: ClassVar[Kind] = "left_open"
    start_field: Final = "open_since"
    marker: Final = "open_episode"
    users: Final = "open_episode_users"
    pending: Final = "open_pending"

    def limit(self, settings: Settings) -> timedelta:
        return timedelta(minutes=settings.left_open_minutes)

    def typed(self, document: Document) -> BottleDocument:
        return cast(BottleDocument, document)

    def current(self, document: BottleDocument) -> datetime | None:
        return document.get(self.start_field) if document.get("last_action") == "opened" else None

    def ended(self, document: BottleDocument, start: datetime) -> bool:
        return document.get("last_action") != "opened" or document.get(self.start_field) != start

    def marked(self, document: BottleDocument) -> Marked:
        return Marked(document.get(self.marker), document.get(self.users))

    def selectors(self, cutoff: datetime) -> tuple[BottleFilter, BottleFilter]:
        return (
            {self.pending: True, self.start_field: {"$gte": EPOCH, "$lt": cutoff}},
            {self.pending: True, self.marker: {"$gte": EPOCH}},
        )

    def going_on(self, document: BottleDocument, episode: datetime) -> BottleFilter:
        return {"_id": document["_id"], "bottle_id": document["_id"], self.start_field: episode, self.pending: True}

    def as_read(self, document: BottleDocument, marked: Marked, *, users: bool = True) -> BottleFilter:
        guard: BottleFilter = {"_id": document["_id"], "bottle_id": document["_id"], self.marker: marked.episode}
        if users:
            guard[self.users] = marked.users
        return guard

    def mark(self, marked: Marked | None, *, pending: bool) -> BottleUpdate:
        fields: BottleDocument = {self.pending: pending}
        if marked is not None and marked.episode is not None:
            fields |= {self.marker: marked.episode, self.users: list(marked.users or ())}
        return {"$set": fields}

    def unmark(self) -> BottleUpdate:
        return {"$unset": {self.marker: "", self.users: ""}}

    def add_users(self, users: list[str]) -> BottleUpdate:
        return {"$addToSet": {self.users: {"$each": users}}}


class _Silent(OneMarker[HeartbeatDocument]):
    """Silent: the episode is the silence since the bottle's last heartbeat (`alive_at`), notified after
    SILENT_MINUTES; over once the bottle was heard from after it began."""

    kind: ClassVar[Kind] = "silent"
    start_field: Final = ALIVE_AT
    marker: Final = "silent_episode"
    users: Final = "silent_episode_users"
    pending: Final = SILENT_PENDING

    def limit(self, settings: Settings) -> timedelta:
        return timedelta(minutes=settings.silent_minutes)

    def typed(self, document: Document) -> HeartbeatDocument:
        return cast(HeartbeatDocument, document)

    def current(self, document: HeartbeatDocument) -> datetime | None:
        return document[self.start_field]

    def ended(self, document: HeartbeatDocument, start: datetime) -> bool:
        return document[self.start_field] > start

    def marked(self, document: HeartbeatDocument) -> Marked:
        return Marked(document.get(self.marker), document.get(self.users))

    def selectors(self, cutoff: datetime) -> tuple[HeartbeatFilter, HeartbeatFilter]:
        return (
            {self.pending: True, self.start_field: {"$gte": EPOCH, "$lt": cutoff}},
            {self.pending: True, self.marker: {"$gte": EPOCH}},
        )

    def going_on(self, document: HeartbeatDocument, episode: datetime) -> HeartbeatFilter:
        return {"_id": document["_id"], "bottle_id": document["_id"], self.start_field: episode, self.pending: True}

    def as_read(self, document: HeartbeatDocument, marked: Marked, *, users: bool = True) -> HeartbeatFilter:
        guard: HeartbeatFilter = {"_id": document["_id"], "bottle_id": document["_id"], self.marker: marked.episode}
        if users:
            guard[self.users] = marked.users
        return guard

    def mark(self, marked: Marked | None, *, pending: bool) -> HeartbeatUpdate:
        fields: HeartbeatDocument = {self.pending: pending}
        if marked is not None and marked.episode is not None:
            fields |= {self.marker: marked.episode, self.users: list(marked.users or ())}
        return {"$set": fields}

    def unmark(self) -> HeartbeatUpdate:
        unset: SilentUnset = {self.marker: "", self.users: ""}
        return {"$unset": unset}

    def add_users(self, users: list[str]) -> HeartbeatUpdate:
        return {"$addToSet": {self.users: {"$each": users}}}


LEFT_OPEN = _LeftOpen()
SILENT = _Silent()


# --- late doses: a slot at a time, the marker holding the latest slot notified --------------------------------


def _bottle(document: Document) -> BottleDocument:
    """A bottle the check read (with its projection), as typed."""
    return cast(BottleDocument, document)


def _review(bottle: BottleDocument, plan: DosePlan, now: datetime, settings: Settings) -> Review:
    """The bottle's due slot reviewed at `now` against the doses it holds (shared/doses/schedules.py)."""
    doses = bottle.get("doses", [])
    return plan.review(
        bottle["dose_due"],
        doses,
        now,
        since=bottle.get("dose_review_from"),
        history_full=len(doses) >= settings.dose_history,
    )


def _reach(bottle: BottleDocument, now: datetime, settings: Settings) -> datetime | None:
    """The latest slot whose late-dose notification the bottle's doses resolve (None: it has no dose). A late
    slot's notification is resolved by a dose the schedule counts for that slot or a later one (the late dose, one
    uploaded late that was in time), or by a dose taken after the slot's grace ran out (the next dose), never by a
    dose counted for an earlier slot (docs/checks.md). That is every slot up to the later of the latest slot
    counted for a dose and the last dose minus grace: on `times` a dose counted for a later slot is past the grace
    of every earlier slot left unsatisfied (within it, it would have taken that slot), and a dose at exactly a
    slot plus grace is within that slot's grace, so both bounds are inclusive."""
    last_dose: datetime | None = bottle.get("last_dose_time")
    if last_dose is None:
        return None
    plan = plan_of(bottle)
    counted = _review(bottle, plan, now, settings).latest_counted
    return last_dose - plan.grace if counted is None else max(counted, last_dose - plan.grace)


def _late_sweeps(now: datetime, settings: Settings) -> list[Sweep]:
    def detect(document: Document, writes: Writes) -> None:
        bottle = _bottle(document)
        plan = plan_of(bottle)
        review = _review(bottle, plan, now, settings)
        for slot in review.late:
            writes.episodes.append(_episode(bottle, "late_dose", slot, push=now - (slot + plan.grace) <= PUSH_WITHIN))
        writes.status.append(review_update(bottle, plan, review))

    def resolve(document: Document, writes: Writes) -> None:
        """Resolve the bottle's late-dose notifications up to the slot its doses reach (_reach), for every user
        the marker records them sent to (`late_episode_users`: the bottle may have changed hands since); the
        marker goes once that covers it."""
        bottle = _bottle(document)
        last_dose = bottle.get("last_dose_time")
        notified = bottle["late_episode"]
        # Guarded by the doses it read too: one uploaded late moves `dose_seq`, not always `last_dose_time`.
        guard: BottleFilter = {
            "_id": bottle["_id"],
            "bottle_id": bottle["_id"],
            "last_dose_time": last_dose,
            "dose_seq": bottle.get("dose_seq"),
        }
        seen: BottleUpdate = {"$set": {"dose_pending": False}}
        reach = _reach(bottle, now, settings)
        if reach is None:
            writes.status.append(UpdateOne(guard, seen))
            return
        for user_id in notified_users(bottle.get("late_episode_users"), bottle["user_id"]):  # each in its own partition
            writes.resolutions.append(notifications.resolve_up_to(user_id, bottle["_id"], "late_dose", reach, now))
        if notified <= reach:
            # Guarded by the users as read too: one a racing run added is resolved by the next run, not forgotten.
            users: list[str] | None = bottle.get("late_episode_users")
            marked: BottleFilter = {**guard, "late_episode": notified, "late_episode_users": users}
            resolved: BottleUpdate = {
                "$set": {"dose_pending": False},
                "$unset": {"late_episode": "", "late_episode_users": ""},
            }
            writes.status.append(UpdateOne(marked, resolved))
        else:  # a later slot is still unresolved
            writes.status.append(UpdateOne(guard, seen))

    return [
        Sweep(DETECT, {"dose_late_at": {"$gte": EPOCH, "$lte": now}}, detect),
        Sweep(RESOLVE, {"dose_pending": True, "late_episode": {"$gte": EPOCH}}, resolve),
    ]


def _late_settler(now: datetime, settings: Settings) -> Settler:
    """The late-dose check's settler. Its marker is the latest slot notified and not yet resolved (written with
    `$max`) with the users they were sent to (`late_episode_users`, added to), and its resolutions reach every
    slot up to one (_reach), so marking needs no guard: the slots the bottle's doses reach (as read again) are
    resolved now, for the users they were recorded for, and a later one recorded is marked with `$max`, its users
    and `dose_pending`, so the resolve sweep looks at it. Already marked (at or past the latest slot recorded):
    only the users recorded are added (another run may have marked it having read the bottle before or after a
    hand-over), guarded by the marker as read, so that a marker resolved meanwhile is read and settled again."""

    def settle(document: Document, recorded: list[Episode], writes: Writes) -> None:
        bottle = _bottle(document)
        earliest, latest = recorded[0], recorded[-1]
        users = _users_of(recorded)
        notified = bottle.get("late_episode")
        if notified is not None and notified >= latest.start:
            if not set(users) <= set(bottle.get("late_episode_users") or ()):
                guard: BottleFilter = {"_id": bottle["_id"], "bottle_id": bottle["_id"], "late_episode": notified}
                added: BottleUpdate = {"$addToSet": {"late_episode_users": {"$each": users}}}
                writes.status.append(UpdateOne(guard, added))
            return
        reach = _reach(bottle, now, settings)
        if reach is not None and reach >= earliest.start:
            for user_id in users:
                writes.resolutions.append(notifications.resolve_up_to(user_id, bottle["_id"], "late_dose", reach, now))
        if reach is None or reach < latest.start:
            mark: BottleUpdate = {
                "$max": {"late_episode": latest.start},
                "$set": {"dose_pending": True},
                "$addToSet": {"late_episode_users": {"$each": users}},
            }
            writes.status.append(UpdateOne(_key(bottle), mark))

    return settle


_BOTTLE_FIELDS = ("user_id", "medication")
CHECKS: dict[Kind, Check] = {
    "left_open": Check(
        "left_open",
        schema.BOTTLES,
        dict.fromkeys(
            (
                *_BOTTLE_FIELDS,
                "last_action",
                LEFT_OPEN.start_field,
                LEFT_OPEN.pending,
                LEFT_OPEN.marker,
                LEFT_OPEN.users,
            ),
            1,
        ),
        LEFT_OPEN.sweeps,
        LEFT_OPEN.settler,
    ),
    "silent": Check(
        "silent",
        schema.BOTTLE_HEARTBEATS,
        dict.fromkeys((*_BOTTLE_FIELDS, SILENT.start_field, SILENT.pending, SILENT.marker, SILENT.users), 1),
        SILENT.sweeps,
        SILENT.settler,
    ),
    "late_dose": Check(
        "late_dose",
        schema.BOTTLES,
        dict.fromkeys(
            (
                *_BOTTLE_FIELDS,
                "schedule",
                "grace_minutes",
                "provisioned_at",
                "schedule_from",
                "dose_due",
                "dose_review_from",
                "dose_seq",
                "doses",
                "last_dose_time",
                "late_episode",
                "late_episode_users",
            ),
            1,
        ),
        _late_sweeps,
        _late_settler,
    ),
}
