"""Domain and data layer of the pill-bottle backend: everything the triggers call."""
