"""NCRONTAB for the local host and the simulator: the parser the settings check every schedule with at
start-up (shared/ncrontab.py), so that a schedule the app accepts is one its timers run on, and one it refuses
never reaches them."""

from shared.ncrontab import Schedule

__all__ = ["Schedule"]
