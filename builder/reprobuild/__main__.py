from reprobuild.cli import entrypoint

entrypoint()
