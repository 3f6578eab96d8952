"""Where bases come from: image references, registries, the catalog, the project's base lock."""
