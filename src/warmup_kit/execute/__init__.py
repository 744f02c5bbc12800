"""Executors: a schedule run for real on a communicator."""
