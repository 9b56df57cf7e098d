"""Orchestration: the command line, policy comparisons, Ray sweeps, reports and plots."""
