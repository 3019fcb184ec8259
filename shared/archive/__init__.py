"""The archive: the cold path beside the reports. Every opened/closed event, kept for good, and every bottle-hour's
heartbeats, kept HEARTBEAT_ARCHIVE_DAYS, as Parquet files hive-partitioned by UTC date (`actions/date=.../`,
`heartbeats/date=.../`) in a blob container of the host's storage account, or a local folder of the same layout.

- `layout`: the two datasets' columns and the name of every file (pure);
- `storage`: where the files are: the container (azure-storage-blob) or a folder, one seam with versioned writes;
- `parquet`: the only module that imports pyarrow (an HTTP cold start never loads it);
- `actions`: the sweep of `bottle_actions` by receive time that writes the events, in files named by what they hold;
- `heartbeats`: the bottle-hours the heartbeat tally reads, merged into their files by key;
- `catch_up`: the port the tally hands them through, and the hours it could not hand, read again later;
- `feeds` and `consumers`: the two feeds the archive reads, and their consumers plugged into shared/feeds.

docs/archive.md says why it is built this way, and what it costs."""
