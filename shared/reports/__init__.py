"""Reports: the per-user hourly and daily documents (`documents`, pure), a page of changes to report writes
(`aggregation`), the change-feed processor (`dispatcher` and `worker`, reading pages from `sources`; the feeds'
`partitions`, their `leases`, and the partition `layouts` across splits and merges), the heartbeat tally (`tally`),
the rebuild command (`rebuild`) and the read API (`reading`)."""
