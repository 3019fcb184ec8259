"""The change feeds' machinery, below the consumers that read them (the reports and the archive): the feeds and
how each is partitioned, the leases that hold a partition's position, the layouts across splits and merges, and
when an hour of a feed is settled. It knows nothing of what a consumer makes of a page."""
