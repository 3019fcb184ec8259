"""Reports: the per-user hourly and daily documents (`documents`, pure), a page of changes to report writes
(`aggregation`), the heartbeat tally (`tally`), the two feeds they read (`feeds`) and their consumers plugged into the
feed machinery (`consumers`, shared/feeds), the rebuild command (`rebuild`) and the read API (`reading`)."""
