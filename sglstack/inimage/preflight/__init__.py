"""Preflight: is this GPU node fit for the expensive run? ("is it the node or the code?")

Layout (one job each):
- `checks`: pure threshold logic, `Requirements` -> `Check` results (pass / warn / fail).
- `parse`: pure parsers of `nvidia-smi` CSV / banner / `topo -m` and of NVML snapshots.
- `probe`: the side effects on the node: nvidia-smi, NVML (nvidia-ml-py if importable), torch copies.
- `allreduce`: the NCCL all-reduce worker, one process per GPU through `torch.distributed`.
- `node`: runs the probes and the checks on this node; `python3 -m sglstack.preflight` is its CLI.
- `gate` / `remote` / `report`: the host side (stack lookup, docker, rich table); not in the image.

Everything the node runs (`checks`, `parse`, `probe`, `allreduce`, `node`, `__main__`) imports only the
standard library and torch, so the package can be copied into a stack image and run with its python3.
"""
