"""The change feeds' machinery, below the consumers that plug into it (`consumers`): how a feed is partitioned, the
leases that hold a partition's position, the layouts across splits and merges, where pages of changes come from,
the hourly passes over the heartbeat documents, the dispatcher and the worker's claim/checkpoint loop, and the
port a pass hands what it counts through. It imports no consumer, and knows nothing of what one makes of a page."""
