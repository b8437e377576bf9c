"""Sizing: job description -> per-GPU memory and throughput -> ranked instances."""
