"""Modes: what to capture (one forward, a training step, a decode step, a dtype, a sweep, measured
runtime), each calling the engine once.
"""
