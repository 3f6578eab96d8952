"""Lockfiles in, pinned and hashed requirements out, and the host-side wheel fetch."""
