"""The lifecycle run's plan (tools/lifecycle/plan.py) expects what the app's rules make of it: a bottle that joins the
fleet mid-run has its schedule counted from its provisioning, as the app counts it (shared/doses/schedules.py:
"the next dose is due N hours after the last dose (or after the schedule started)"; a schedule starts at
provisioning), so the late doses the plan injects are the slots the app finds late, whatever the run's length."""

import random
from datetime import timedelta

import pytest

from shared.doses.schedules import DosePlan, parse_schedule
from tools.lifecycle.plan import plan_lifecycle


@pytest.mark.parametrize(("days", "seed"), [(3, 7), (1, 2), (2, 5), (5, 3)])
def test_every_bottle_s_first_planned_dose_is_due_when_the_app_counts_it_from_its_provisioning(days, seed):
    life = plan_lifecycle(random.Random(seed), 16, days)

    for bottle in life.plan.bottles:
        slots = sorted(s.due for s in life.plan.slots if s.bottle_id == bottle.bottle_id)
        app = DosePlan(parse_schedule(bottle.schedule), bottle.grace, start=life.joined[bottle.bottle_id])
        assert slots[:1] == [app.first_due()][: len(slots)], bottle


def test_a_missed_first_dose_of_an_every_12_hours_bottle_is_expected_at_the_slot_the_app_notifies():
    """The case a run met (`./dev lifecycle --days 3`): bottle-0009, every 12 hours, provisioned at 11:36:00, missed
    its first two doses; the app notified the episodes 23:36:00 and 11:36:00, the plan expected them a minute
    later (it counted from the bottle's first request, a minute after its provisioning)."""
    life = plan_lifecycle(random.Random(7), 16, 3)
    bottle = next(b for b in life.plan.bottles if b.bottle_id == "bottle-0009")
    joined = life.joined[bottle.bottle_id]
    assert bottle.schedule == {"every_hours": 12}

    expected = sorted(e.episode_start for e in life.plan.expected if e.bottle_id == bottle.bottle_id)

    app = DosePlan(parse_schedule(bottle.schedule), bottle.grace, start=joined)
    late = app.review(app.first_due(), [], now=joined + timedelta(hours=24, minutes=bottle.grace_minutes)).late
    assert expected == late == [joined + timedelta(hours=12), joined + timedelta(hours=24)]
