"""A training job's step time, memory and traffic on a placed cluster, and
the search for its best layout (book, Chapters 1 and 6)."""
