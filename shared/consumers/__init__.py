"""The app's consumers of its feeds, plugged into the feed machinery: the only package that knows both the reports
and the archive."""
