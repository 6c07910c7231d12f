"""Host-side planning of a kernel launch, below the kernels that run it: the tiles of a call
(`tiles`: TileConfig and the head dim's tile arithmetic; `config`: heuristic_config and
default_config; `tuned_tiles`: the table of tuned tiles), each Hopper kernel's shared memory,
stages and grid (`hopper_forward`, `hopper_backward`), FA1's launcher heuristics
(`fa1_launch`), the occupancy question they ask (`occupancy`) and the forward's outputs
(`outputs`). It imports no kernel module: a kernel module imports it (pyproject.toml's
import-linter contracts)."""
