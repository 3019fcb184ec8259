"""Doses: the schedules (`schedules`, DST-correct slots) and the next-dose-due fields kept on each bottle
(`due_tracking`), which provisioning starts, ingestion advances and the late-dose check reviews."""
