"""Reports: the per-user hourly and daily documents (`documents`, pure), a page of changes to report writes
(`aggregation`), the change-feed consumer with its sources and leases (`change_feed`), the rebuild command
(`rebuild`) and the read API (`reading`)."""
