"""Patches, the host side of the patch engine (`sglstack.inimage.patchkit`, the code the image build runs):
which patches and version apply, a release checked against its real wheel, a tree patched or verified."""
