"""Leaves every layer may use: bounded readers, JSON/YAML loaders, atomic writes, leftovers."""
