"""How scored rows become answers, per task (numpy only: tasks and the inference layer share it)."""
