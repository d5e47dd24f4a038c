"""Optional bridges from STARE Gym's algorithm library (`stare/`) to other trainers.

Each bridge lives in its own module and imports its host library lazily, so importing this package
never requires an optional extra:

- `training.integrations.trl`: `StareGRPOTrainer`, STARE inside TRL's `GRPOTrainer` (extra `trl`).
"""
