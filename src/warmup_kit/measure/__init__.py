"""Measurements on this machine and the models fitted to them: alpha-beta-
gamma fits, the ring/tree crossover, MPICH's own tuning table, Lab 01."""
