"""Kernel coverage: cuobjdump listings of wheels and images, judged by pure rules."""
