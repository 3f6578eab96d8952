"""What builds and runs images: the Docker engine, buildah, and loading layers between them."""
