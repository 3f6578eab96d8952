"""FIXTURE stub standing in for NGC's torch build (no CUDA here)."""

__version__ = "2.6.0a0+ecf3bae40a.nv25.1"
