"""The image labels sglstack itself reads back: one home, so that writer and readers never disagree.

Build writes them, Publish and Deploy read them from the registry or the engine, Diff compares them.
"""

from __future__ import annotations

PREFIX = "io.sglstack."
CONFIG_HASH_LABEL = PREFIX + "config-hash"  # our content hash of the build inputs (not a registry digest)
VERIFIED_LABEL = PREFIX + "verified"  # "true" once in-image verification passed
TARGET_LABEL = PREFIX + "target"
BUILDER_LABEL = PREFIX + "builder"
PATCH_LABEL_PREFIX = PREFIX + "patch."
PIN_LABEL_PREFIX = PREFIX + "pin."
