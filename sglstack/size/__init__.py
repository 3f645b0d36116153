"""Image size: the size report of a built image (layers, packages, files present twice), the budget gate,
and the CUDA libraries a stage would hold twice."""
