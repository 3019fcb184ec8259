"""Doses: the schedules (`schedules`, DST-correct slots), the next-dose-due fields kept on each bottle
(`due_tracking`), which provisioning starts, ingestion advances and the late-dose check reviews, and the `bottles`
document's typed shape that they and every job writing a bottle share (`bottle_document`)."""
