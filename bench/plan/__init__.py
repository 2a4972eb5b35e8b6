"""The planner (`make plan`, `python -m bench.plan`): which number of ranks and global batch reach a
target soonest, and at what cost, before a job is launched."""
