"""Pictures and widgets: one figure spec, drawn live with matplotlib or as a
kernel-free Plotly twin on the static site (book, every chapter)."""
