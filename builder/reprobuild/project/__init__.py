"""The project: its ``reprobuild.yaml``, read and checked into typed records."""
