"""reprobuild's in-image runtime. Standard library only; never imports ``reprobuild``.

Copied into every image under /opt/reprobuild/runtime and put on the image venv's path.
"""

MANIFEST_PATH = "/opt/reprobuild/manifest.json"
